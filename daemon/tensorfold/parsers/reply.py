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
from .reasoning import REASONING_MARKERS, ReasoningParser, starts_in_reasoning
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


def build_reply_parser(chat_template: str, tools: Iterable[Mapping[str, Any]] | Mapping[str, Any] | None = None,
                       *, prompt: str = "", thinking: bool = True, parallel_tool_calls: bool = True,
                       new_id: Callable[[], str] | None = None, tool_format: str | None = None,
                       reasoning_format: str | None = None, forced_call: bool = False) -> ReplyParser:
    """The reply parser for a checkpoint's template and a request.

    The tool format comes from `parser_for_template` unless `tool_format`
    names one; no tool parser when no tools are offered (tool_choice none
    hides them) or the template has no tool format. The reasoning markers come
    from `reasoning_for_template` unless `reasoning_format` names them; none
    when thinking is off for the request. `prompt` is the rendered prompt:
    when it ends with the open marker, the reply starts inside the block.
    `forced_call`: the request forced a call (tool_choice required or a named
    function): one cut off by the token limit still comes back as a call."""
    from . import TOOL_PARSERS, parser_for_template, reasoning_for_template

    tool_parser = None
    name = tool_format or parser_for_template(chat_template)
    if tools and name:
        tool_parser = TOOL_PARSERS[name](tools, new_id=new_id, parallel_tool_calls=parallel_tool_calls,
                                         forced=forced_call)
    reasoning = None
    rname = reasoning_format or reasoning_for_template(chat_template)
    if rname and thinking:
        open_marker, close_marker = REASONING_MARKERS[rname]
        reasoning = ReasoningParser(open_marker, close_marker,
                                    starts_inside=starts_in_reasoning(prompt, open_marker),
                                    call_openers=tool_parser.openers if tool_parser else ())
    return ReplyParser(reasoning=reasoning, tools=tool_parser)
