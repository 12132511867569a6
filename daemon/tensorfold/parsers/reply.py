"""A whole reply: reasoning first, then tool calls in the answer.

    parser = ReplyParser(reasoning=ReasoningParser(...), tools=QwenXmlParser(...))
    for piece in pieces:
        events = parser.feed(piece)
    events = parser.end()

Reasoning events pass through; the reasoning parser's answer text goes into
the tool parser. Either part may be None (no thinking, no tools offered).
`build_reply_parser` wires both from a chat template, as the server would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .base import ToolParser
from .reasoning import REASONING_MARKERS, ReasoningParser
from .types import ContentDelta, Event, Reply, coalesce, collect


class ReplyParser:
    def __init__(self, *, reasoning: ReasoningParser | None = None, tools: ToolParser | None = None) -> None:
        self.reasoning = reasoning
        self.tools = tools

    def feed(self, text: str) -> list[Event]:
        events = self.reasoning.feed(text) if self.reasoning else [ContentDelta(text)] if text else []
        return self._route(events)

    def end(self) -> list[Event]:
        out = self._route(self.reasoning.end()) if self.reasoning else []
        if self.tools:
            out += self.tools.end()
        return coalesce(out)

    def parse(self, text: str) -> Reply:
        """A whole reply, on fresh parsers."""
        fresh = ReplyParser(reasoning=_fresh_reasoning(self.reasoning), tools=_fresh_tools(self.tools))
        return collect(fresh.feed(text) + fresh.end())

    def _route(self, events: list[Event]) -> list[Event]:
        if not self.tools:
            return coalesce(events)
        out: list[Event] = []
        for e in events:
            if isinstance(e, ContentDelta):
                out += self.tools.feed(e.text)
            else:
                out.append(e)
        return coalesce(out)


def _fresh_reasoning(p: ReasoningParser | None) -> ReasoningParser | None:
    if p is None:
        return None
    return ReasoningParser(p.open_marker, p.close_marker, starts_inside=p.starts_inside,
                           call_openers=p.call_openers, strip=p.strip)


def _fresh_tools(p: ToolParser | None) -> ToolParser | None:
    if p is None:
        return None
    return type(p)(p.tools, new_id=p.new_id, parallel_tool_calls=p.parallel_tool_calls, forced=p.forced)


def build_reply_parser(tools: Iterable[Mapping[str, Any]] | Mapping[str, Any] | None = None, *,
                       tool_format: str | None = None, reasoning_format: str | None = None,
                       starts_inside: bool = False, parallel_tool_calls: bool = True,
                       new_id: Callable[[], str] | None = None, forced_call: bool = False) -> ReplyParser:
    """The reply parser for a request.

    `tool_format` names the checkpoint's tool call format (TOOL_PARSERS); no
    tool parser without one or without offered tools (tool_choice none hides
    them). `reasoning_format` names its think markers (REASONING_MARKERS); None
    when the reply does not think. `starts_inside`: the prompt opened the think
    block, so the reply starts inside it. `forced_call`: the request forced a
    call (tool_choice required or a named function): one cut off by the token
    limit still comes back as a call. The server reads both formats from the
    template once (api/request/chat_format.py); `parser_for_template` and
    `reasoning_for_template` sniff them."""
    from . import TOOL_PARSERS

    tool_parser = None
    if tools and tool_format:
        tool_parser = TOOL_PARSERS[tool_format](tools, new_id=new_id, parallel_tool_calls=parallel_tool_calls,
                                                forced=forced_call)
    reasoning = None
    if reasoning_format:
        open_marker, close_marker = REASONING_MARKERS[reasoning_format]
        reasoning = ReasoningParser(open_marker, close_marker, starts_inside=starts_inside,
                                    call_openers=tool_parser.openers if tool_parser else ())
    return ReplyParser(reasoning=reasoning, tools=tool_parser)
