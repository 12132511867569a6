"""tool_choice "required" or a named function: the reply must open a call to an offered tool.

The text that opens a call and precedes a tool name comes from the template's
own rendered call (a call to a placeholder name, rendered by the chat
template); a template that renders no calls falls back to the tool format's
usual text. engine/constraints.py's ToolForce then fixes the reply's tokens.
"""

from __future__ import annotations

from typing import Any

from ...engine.constraints import ToolForce
from .. import errors
from .tool_prompt import CALL_OPEN, ToolFormat

MARK = "tensorfold_tool_name_mark"
USUAL = {"hermes": (CALL_OPEN + '{"name": "', '"'), "qwen_xml": ("<tool_call>\n<function=", ">"),
         "glm": ("<tool_call>", "\n"), "gemma4": ("<|tool_call>call:", "{"), "json": ('{"name": "', '"')}


def forces_call(body: Any) -> bool:
    """tool_choice "required" or a named function."""
    return body.tool_choice == "required" or isinstance(body.tool_choice, dict)


def offered(body: Any) -> list[dict[str, Any]] | None:
    """The tools the template gets: none for "none", only the named one for a named function."""
    if body.tool_choice == "none" or not body.tools:
        return None if body.tool_choice == "none" else body.tools
    if isinstance(body.tool_choice, dict):
        name = body.tool_choice["function"]["name"]
        named = [t for t in body.tools if t["function"]["name"] == name]
        if not named:
            raise errors.invalid(f"Invalid 'tool_choice': no offered tool is named {name!r}",
                                 param="tool_choice.function.name")
        return named
    return body.tools


def call_text(tokenizer: Any, template: str, fmt: str, tools: list[dict[str, Any]]) -> tuple[str, str]:
    """(text from the call opener to the tool name, text right after the name)."""
    opener = USUAL[fmt][0].split("\n")[0][:12]
    call = {"id": "call_0", "type": "function", "function": {"name": MARK, "arguments": {}}}
    try:
        text = tokenizer.render_chat([{"role": "user", "content": "x"},
                                      {"role": "assistant", "content": "", "tool_calls": [call]}],
                                     tools=tools, add_generation_prompt=False)
    except Exception:
        text = ""
    at, start = text.find(MARK), text.rfind(opener, 0, max(text.find(MARK), 0))
    if at < 0 or start < 0 or at + len(MARK) >= len(text):
        return USUAL[fmt]
    return text[start:at], text[at + len(MARK)]


def tool_force(engine: Any, body: Any, tools: list[dict[str, Any]] | None, fmt: ToolFormat,
               think: Any) -> ToolForce | None:
    """The forced-call rule, or None when the request does not force a call.
    `fmt`: the request's tool format (tool_prompt.tool_format)."""
    if not forces_call(body):
        return None
    if not tools:
        raise errors.invalid("tool_choice requires offered tools", param="tool_choice")
    tok = engine.tokenizer
    template = getattr(tok, "chat_template", "")
    if fmt.parser is None:
        raise errors.invalid("This model's chat template has no tool-call format, so a call cannot be forced; "
                             f"start the server with --tool-parser ({', '.join(USUAL)})", param="tool_choice")
    if fmt.builtin:                # the built-in prompt renders calls as the usual Hermes text
        prefix, name_end = USUAL[fmt.parser]
    else:
        prefix, name_end = call_text(tok, template, fmt.parser, tools)
    names = tuple(t["function"]["name"] for t in tools)
    return ToolForce(tuple(tok.encode(prefix)), names, name_end, tok.decode, tok.encode, think)
