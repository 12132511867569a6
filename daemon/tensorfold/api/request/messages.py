"""Chat messages as the chat template gets them (SPEC.md, messages).

- Developer messages have system semantics: they render as system messages.
- Only the leading run of system and developer messages merges, in order,
  into one leading system message (contents joined by a blank line).
- Later system and developer messages stay where they are; when the template
  cannot render them there, build.py renders them as user messages
  (`demote_later_system`).
- Text content parts were concatenated in order by the schema.
- The caller's objects are never mutated: every function returns new dicts.
- Assistant tool calls reach the template as {"id", "type", "function":
  {"name", "arguments"}}, with `arguments` parsed from its JSON string into an
  object when it is one (templates iterate or `tojson` it; vLLM does the same),
  and kept as the string otherwise.
"""

from __future__ import annotations

from .images import template_content

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from .. import errors
from .names import field_name
from .parsing import loads_bounded
from .schemas import Message, ToolCall

SYSTEM_ROLES = ("system", "developer")


def template_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Validated messages -> new dicts for the chat template, leading system merged."""
    out = []
    for i, message in enumerate(messages):
        _check_roles(i, message)
        out.append(_as_dict(message))
    return merge_leading_system(out)


def merge_leading_system(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Merge the leading system/developer run into one system message; later
    developer messages become system messages in place. Returns new dicts."""
    lead = 0
    while lead < len(messages) and messages[lead]["role"] in SYSTEM_ROLES:
        lead += 1
    out: list[dict[str, Any]] = []
    if lead:
        texts = [m.get("content") or "" for m in messages[:lead]]
        out.append({"role": "system", "content": "\n\n".join(t for t in texts if t)})
    for m in messages[lead:]:
        d = copy.deepcopy(dict(m))
        if d["role"] == "developer":
            d["role"] = "system"
        out.append(d)
    return out


def demote_later_system(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """The messages with every system message after the first position turned
    into a user message, or None when there is none to turn."""
    later = [i for i, m in enumerate(messages) if i > 0 and m["role"] in SYSTEM_ROLES]
    if not later:
        return None
    return [dict(m, role="user") if i in later else dict(m) for i, m in enumerate(messages)]


def _check_roles(i: int, m: Message) -> None:
    def field(name: str) -> str:
        return field_name(f"messages[{i}].{name}")

    if m.tool_calls is not None and m.role != "assistant":
        raise errors.invalid(f"Invalid '{field('tool_calls')}': only assistant messages carry tool calls",
                             param=field("tool_calls"))
    if m.role == "tool" and not m.tool_call_id:
        raise errors.invalid(f"Missing required parameter: '{field('tool_call_id')}' (tool messages answer a call)",
                             param=field("tool_call_id"), code=errors.MISSING)
    if m.content is None and not (m.role == "assistant" and m.tool_calls):
        raise errors.invalid(f"Missing required parameter: '{field('content')}'",
                             param=field("content"), code=errors.MISSING)


def _as_dict(m: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": template_content(m.content) if m.content is not None else ""}
    if m.name is not None:
        d["name"] = m.name
    if m.role == "assistant":
        if m.tool_calls:
            d["tool_calls"] = [_tool_call(tc) for tc in m.tool_calls]
        if m.reasoning_content is not None:
            d["reasoning_content"] = m.reasoning_content
    if m.role == "tool":
        d["tool_call_id"] = m.tool_call_id
    return d


def _tool_call(tc: ToolCall) -> dict[str, Any]:
    args: Any = tc.function.arguments
    if isinstance(args, str):
        try:
            parsed = loads_bounded(args)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):             # else the template gets the text
            args = parsed
    else:
        args = copy.deepcopy(args)
    call: dict[str, Any] = {"type": "function", "function": {"name": tc.function.name, "arguments": args}}
    if tc.id is not None:
        call["id"] = tc.id
    return call
