"""Tool-call and reasoning parsers: plain text in, plain types out, streaming and whole.

Events (types.py): ContentDelta(text), ReasoningDelta(text),
ToolCallStart(index, id, name), ToolCallArgsDelta(index, text), ToolCallEnd(index).
`collect(events) -> Reply(content, reasoning, calls: list[ToolCall(id, name, arguments)])`.

Tool parsers (one per format, registry below) share one surface:

    p = TOOL_PARSERS[name](tools, new_id=None, parallel_tool_calls=True)
    p.feed(text) -> list[Event]; p.end() -> list[Event]
    p.parse(text) -> (content, calls)

Reasoning: `ReasoningParser(open, close, starts_inside=, call_openers=, strip=)`
with the same feed/end, and parse(text) -> (reasoning, content).
`ReplyParser(reasoning=, tools=)` chains them; `build_reply_parser` wires
both from a chat template. Nothing here imports torch, Quart or pydantic.
"""

from __future__ import annotations

import re

from .base import ToolParser
from .gemma4 import Gemma4Parser
from .glm import GlmParser
from .hermes import HermesParser
from .jsonish import JsonCallParser
from .qwen_xml import QwenXmlParser
from .reasoning import REASONING_MARKERS, ReasoningParser, starts_in_reasoning
from .reply import ReplyParser, build_reply_parser
from .schema import convert, param_type, tool_schemas
from .types import (ContentDelta, Event, FirstCallOnly, ReasoningDelta, Reply, ToolCall, ToolCallArgsDelta,
                    ToolCallEnd, ToolCallStart, coalesce, collect, first_call_only, new_call_id)

TOOL_PARSERS: dict[str, type[ToolParser]] = {
    "qwen_xml": QwenXmlParser,
    "hermes": HermesParser,
    "gemma4": Gemma4Parser,
    "glm": GlmParser,
    "json": JsonCallParser,
}

_TOOLS_VAR = re.compile(r"\btools\b")


def parser_for_template(chat_template: str) -> str | None:
    """The TOOL_PARSERS name for a checkpoint's chat template, or None when
    the template does not take tools.

    Gemma 4's `<|tool_call>` first, then GLM's `<arg_key>`, then `<tool_call>`
    with `<function=` (Qwen XML), then `<tool_call>` alone (Hermes JSON); a
    template that only mentions `tools` gets plain JSON calls."""
    t = chat_template or ""
    if "<|tool_call>" in t:
        return "gemma4"
    if "<arg_key>" in t:
        return "glm"
    if "<tool_call>" in t:
        return "qwen_xml" if "<function=" in t else "hermes"
    if _TOOLS_VAR.search(t):
        return "json"
    return None


def reasoning_for_template(chat_template: str) -> str | None:
    """The REASONING_MARKERS name for a template: Gemma 4's thought channel,
    `<think>` blocks, or None."""
    t = chat_template or ""
    if "<|channel>" in t:
        return "gemma4"
    if "<think>" in t or "</think>" in t:
        return "think"
    return None


__all__ = [
    "ContentDelta", "ReasoningDelta", "ToolCallStart", "ToolCallArgsDelta", "ToolCallEnd", "Event",
    "ToolCall", "Reply", "collect", "coalesce", "FirstCallOnly", "first_call_only", "new_call_id",
    "ToolParser", "QwenXmlParser", "HermesParser", "Gemma4Parser", "GlmParser", "JsonCallParser",
    "TOOL_PARSERS", "parser_for_template", "reasoning_for_template",
    "ReasoningParser", "REASONING_MARKERS", "starts_in_reasoning",
    "ReplyParser", "build_reply_parser", "tool_schemas", "param_type", "convert",
]
