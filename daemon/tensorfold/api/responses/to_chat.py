"""A Responses request -> the equivalent chat completion request.

A response runs as the chat completion a chat client would send for the same
conversation: `instructions` become the leading system message (this turn
only), the stored conversation (previous_response_id) and this turn's input
items become messages (items.py), and the fields map onto chat's:

    max_output_tokens          max_completion_tokens
    tools (function tools)     tools [{"type": "function", "function": {...}}]
    tool_choice                none / auto / required as is; a function ->
                               {"type": "function", "function": {"name"}};
                               allowed_tools -> its tools only, with its mode
    reasoning.effort           reasoning_effort
    text.format                response_format (json_schema / json_object)
    temperature, top_p, top_k, min_p, seed, stop, ignore_eos, draft,
    thinking_budget, chat_template_kwargs, priority, parallel_tool_calls: as sent

The chat schema and build.prepare_chat then judge the request exactly as they
judge a chat request, speaking the Responses names of the fields (RESPONSES_NAMES,
request/names.py), so their refusals name the fields this request sent.
"""

from __future__ import annotations

from typing import Any

from ...config import SamplingDefaults
from .. import errors
from ..request.names import Vocabulary
from ..request.schemas import ChatCompletionRequest
from .items import items_to_messages
from .objects import ResponseHead
from .schemas import ResponsesRequest

# chat field -> (Responses field, whether the path below it carries over); 'messages'
# is 'input' whole, as message indexes do not match input item indexes
RESPONSES_NAMES: Vocabulary = {
    "messages": ("input", False), "max_completion_tokens": ("max_output_tokens", False),
    "max_tokens": ("max_output_tokens", False), "response_format": ("text.format", True),
    "reasoning_effort": ("reasoning.effort", False)}


def chat_body(body: ResponsesRequest, raw: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat completion request body (JSON, not yet validated) for `body`,
    continuing `history` (the stored items followed by this turn's input)."""
    messages: list[dict[str, Any]] = []
    if body.instructions is not None:
        messages.append({"role": "system", "content": body.instructions})
    messages += items_to_messages(history)
    chat: dict[str, Any] = {"messages": messages}
    chat.update((key, raw[key]) for key in ResponsesRequest.PASS_THROUGH if key in raw)
    if body.max_output_tokens is not None:
        chat["max_completion_tokens"] = body.max_output_tokens
    tools, choice = _tools_and_choice(body.tools, body.tool_choice)
    if tools is not None:
        chat["tools"] = tools
    if choice is not None:
        chat["tool_choice"] = choice
    if body.reasoning is not None and body.reasoning["effort"] is not None:
        chat["reasoning_effort"] = body.reasoning["effort"]
    fmt = body.text["format"] if body.text is not None else {"type": "text"}
    if fmt["type"] == "json_object":
        chat["response_format"] = {"type": "json_object"}
    elif fmt["type"] == "json_schema":
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            k: fmt[k] for k in ("name", "schema", "description", "strict") if k in fmt}}
    return chat


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}


def _tools_and_choice(tools: list[dict[str, Any]] | None, choice: Any) -> tuple[Any, Any]:
    offered = {t["name"]: t for t in tools or ()}

    def known(name: str) -> str:
        if name not in offered:
            raise errors.invalid(f"Invalid 'tool_choice': {name!r} is not one of the offered tools"
                                 + (f" ({', '.join(offered)})" if offered else " (none are offered)"),
                                 param="tool_choice")
        return name

    chat_tools = [_chat_tool(t) for t in tools] if tools is not None else None
    if isinstance(choice, dict) and choice["type"] == "function":
        return chat_tools, {"type": "function", "function": {"name": known(choice["name"])}}
    if isinstance(choice, dict):              # allowed_tools: offer only those, in their mode
        allowed = {known(t["name"]) for t in choice["tools"]}
        return [_chat_tool(t) for t in tools or () if t["name"] in allowed], choice["mode"]
    return chat_tools, choice


def head(body: ResponsesRequest, chat: ChatCompletionRequest, model: str, response_id: str,
         defaults: SamplingDefaults) -> ResponseHead:
    """What the response echoes: the request's settings, defaults filled in."""
    return ResponseHead(
        id=response_id,
        model=model,
        instructions=body.instructions,
        max_output_tokens=body.max_output_tokens,
        metadata=dict(body.metadata or {}),
        parallel_tool_calls=chat.parallel_tool_calls is not False,
        previous_response_id=body.previous_response_id,
        reasoning=dict(body.reasoning or {"effort": None, "summary": None}),
        store=body.store is not False,
        temperature=defaults.temperature if chat.temperature is None else chat.temperature,
        top_p=defaults.top_p if chat.top_p is None else chat.top_p,
        text=body.text or {"format": {"type": "text"}},
        tool_choice=body.tool_choice or "auto",
        tools=list(body.tools or ()),
        user=body.user,
        ignored=body.ignored_fields,
    )
