"""Responses input items: checked, then turned into chat messages.

`normalize_input` checks a request's `input` (a string, or a list of items)
and returns it as a list of item dicts: a string becomes one user message.
Items are the conversation's stored form: a response keeps the items it
continued from, and the next turn (previous_response_id) adds that
response's output items and its own input.

`items_to_messages` turns items into the messages a chat client would send.
An assistant turn is one chat message: each run of assistant-side items
(reasoning, assistant messages, function_call) becomes one assistant message,
as chat returns a reply: reasoning_content (the reasoning items' content
text), content (the messages' text; null when the turn only calls tools) and
tool_calls (call_id, name, arguments). Other items map one to one:

    message (user, system, developer)   a message of its role (parts -> chat parts)
    function_call_output                a tool message answering call_id

Refused with 400: input_file parts and file ids (unsupported), audio,
item_reference items, encrypted reasoning, and built-in tool items. Keys an
item or content part does not define are dropped (ITEM_KEYS, PART_KEYS), so
the store keeps only what the Responses API defines.
"""

from __future__ import annotations

import copy
from typing import Any, NoReturn

from .. import errors

ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
BUILT_IN_ITEMS = (
    "file_search_call", "web_search_call", "computer_call", "computer_call_output", "image_generation_call",
    "code_interpreter_call", "local_shell_call", "local_shell_call_output", "shell_call", "shell_call_output",
    "apply_patch_call", "apply_patch_call_output", "mcp_list_tools", "mcp_approval_request",
    "mcp_approval_response", "mcp_call", "custom_tool_call", "custom_tool_call_output", "tool_search_call",
    "tool_search_output", "compaction", "program", "program_output", "additional_tools",
)

ITEM_KEYS = {
    "message": ("type", "role", "content", "id", "status"),
    "function_call": ("type", "call_id", "name", "arguments", "id", "status"),
    "function_call_output": ("type", "call_id", "output", "id", "status"),
    "reasoning": ("type", "id", "summary", "content", "status"),
}
PART_KEYS = {
    "input_text": ("type", "text"), "output_text": ("type", "text", "annotations", "logprobs"),
    "refusal": ("type", "refusal"), "input_image": ("type", "image_url", "detail"),
    "reasoning_text": ("type", "text"), "summary_text": ("type", "text"),
}


def _kept(item: dict[str, Any], kind: str) -> dict[str, Any]:
    """A copy of `item` (of type `kind`) with only the keys its type defines; its content
    parts likewise."""
    out = {key: copy.deepcopy(item[key]) for key in ITEM_KEYS[kind] if key in item}
    out["type"] = kind
    for key in ("content", "output", "summary"):
        if isinstance(out.get(key), list):
            out[key] = [{k: v for k, v in part.items() if k in PART_KEYS[part["type"]]} for part in out[key]]
    return out


def _invalid(message: str, param: str) -> NoReturn:
    raise errors.invalid(f"Invalid '{param}': {message}", param=param)


def _unsupported(message: str, param: str) -> NoReturn:
    raise errors.unsupported(f"{message} ('{param}')", param)


def _string(item: dict[str, Any], key: str, where: str, *, empty: bool = False) -> str:
    value = item.get(key)
    if not isinstance(value, str) or (not empty and not value):
        if key not in item or value is None:
            raise errors.invalid(f"Missing required parameter: '{where}.{key}'", param=f"{where}.{key}",
                                 code=errors.MISSING)
        _invalid("must be a nonempty string" if not empty else "must be a string", f"{where}.{key}")
    return value


def normalize_input(value: Any) -> list[dict[str, Any]]:
    if value is None:
        raise errors.invalid("Missing required parameter: 'input'", param="input", code=errors.MISSING)
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        _invalid("must be a string or an array of input items", "input")
    return [_item(item, f"input[{i}]") for i, item in enumerate(value)]


def _item(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        _invalid("must be an object (an input item)", where)
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        return _message(item, where)
    if kind == "function_call":
        for key in ("call_id", "name"):
            _string(item, key, where)
        _string(item, "arguments", where, empty=True)
    elif kind == "function_call_output":
        _string(item, "call_id", where)
        output = item.get("output")
        if isinstance(output, list):
            for i, part in enumerate(output):
                _part(part, f"{where}.output[{i}]")
        elif not isinstance(output, str):
            _invalid("must be a string or an array of content parts", f"{where}.output")
    elif kind == "reasoning":
        _reasoning(item, where)
    elif kind == "item_reference":
        _unsupported("item_reference items are not supported by this server; send the items themselves", where)
    elif kind in BUILT_IN_ITEMS:
        _unsupported(f"{kind} items belong to built-in tools, which this server does not run", f"{where}.type")
    elif not isinstance(kind, str):
        _invalid("must have a string 'type' (or a 'role' for a message)", where)
    else:
        _invalid(f"unknown item type {kind!r}", f"{where}.type")
    return _kept(item, kind)


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ROLES:
        _invalid(f"must be one of {', '.join(ROLES)}", f"{where}.role")
    content = item.get("content")
    if isinstance(content, list):
        if not content:
            _invalid("must not be an empty array", f"{where}.content")
        for i, part in enumerate(content):
            _part(part, f"{where}.content[{i}]")
            if role == "assistant" and part["type"] not in TEXT_PARTS:
                _invalid("an assistant message carries text parts only", f"{where}.content[{i}].type")
    elif not isinstance(content, str):
        if content is None:
            raise errors.invalid(f"Missing required parameter: '{where}.content'", param=f"{where}.content",
                                 code=errors.MISSING)
        _invalid("must be a string or an array of content parts", f"{where}.content")
    return _kept(item, "message")


def _part(part: Any, where: str) -> None:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in TEXT_PARTS:
        _string(part, TEXT_PARTS[kind], where, empty=True)
    elif kind == "input_image":
        if part.get("file_id") is not None:
            _unsupported("file ids are not supported by this server; send the image as image_url", where)
        _string(part, "image_url", where)
    elif kind == "input_file":
        _unsupported("input_file parts are not supported by this server", where)
    elif kind == "input_audio":
        _unsupported("audio input is not supported by this server", where)
    elif not isinstance(kind, str):
        _invalid("must be an object with a string 'type'", where)
    else:
        _invalid(f"unknown content part type {kind!r}", f"{where}.type")


def _reasoning(item: dict[str, Any], where: str) -> None:
    if item.get("encrypted_content") is not None:
        _unsupported("encrypted reasoning is not supported by this server; send the reasoning content",
                     f"{where}.encrypted_content")
    for key, part_type in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = item.get(key)
        if parts is None:
            continue
        if not isinstance(parts, list):
            _invalid("must be an array", f"{where}.{key}")
        for i, part in enumerate(parts):
            if not isinstance(part, dict) or part.get("type") != part_type:
                _invalid(f"must be an object of type {part_type!r}", f"{where}.{key}[{i}]")
            _string(part, "text", f"{where}.{key}[{i}]", empty=True)


# -- items -> chat messages ----------------------------------------------------

ASSISTANT_SIDE = ("reasoning", "function_call")


def items_to_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    turn: list[dict[str, Any]] = []          # the assistant-side items of the current turn
    for item in items:
        if item["type"] in ASSISTANT_SIDE or (item["type"] == "message" and item["role"] == "assistant"):
            turn.append(item)
            continue
        if turn:
            messages.append(_assistant(turn))
            turn = []
        if item["type"] == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _chat_content(item["output"])})
        else:
            messages.append({"role": item["role"], "content": _chat_content(item["content"])})
    if turn:
        messages.append(_assistant(turn))
    return messages


def _assistant(turn: list[dict[str, Any]]) -> dict[str, Any]:
    """One assistant turn's items as the chat message of that reply."""
    reasoning = "".join(p["text"] for item in turn if item["type"] == "reasoning" for p in item.get("content") or ())
    texts = [_text(item["content"]) for item in turn if item["type"] == "message"]
    calls = [{"id": item["call_id"], "type": "function",
              "function": {"name": item["name"], "arguments": item["arguments"]}}
             for item in turn if item["type"] == "function_call"]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else (None if calls else "")}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message


def _text(content: str | list[dict[str, Any]]) -> str:
    if isinstance(content, str):
        return content
    return "".join(part[TEXT_PARTS[part["type"]]] for part in content)


def _chat_content(content: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        kind = part["type"]
        if kind in TEXT_PARTS:
            parts.append({"type": "text", "text": part[TEXT_PARTS[kind]]})
        else:                          # input_image: chat's image_url part (chat decides)
            image = {"url": part["image_url"]}
            if part.get("detail") is not None:
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
    return parts
