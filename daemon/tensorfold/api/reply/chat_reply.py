"""A chat reply's text through the reply parser: content, reasoning_content and tool_calls.

The parser (parsers/) is built per request from the checkpoint's chat
template, the offered tools and the request's thinking switch; with none of
those, the reply is content as written. Streamed deltas and the whole message
come from the same parser, so a streamed reply equals its whole one.
"""

from __future__ import annotations

from typing import Any

from ...parsers import ContentDelta, Event, ReasoningDelta, ReplyParser, ToolCallArgsDelta, ToolCallStart, build_reply_parser
from ..request.chat_format import ChatFormat
from ..request.tool_force import forces_call


def reply_parser(chat: ChatFormat, body: Any, request: Any) -> ReplyParser | None:
    """The parser for `request` (the engine request of `body`), or None when the
    reply is plain content. The reply thinks when the request has think markers."""
    tools = None if body.tool_choice == "none" else body.tools
    if not chat.template or not (tools or chat.tools.parser or chat.reasoning):
        return None
    think = request.think
    parser = build_reply_parser(tools, tool_format=chat.tools.parser,
                                reasoning_format=chat.reasoning.name if think is not None else None,
                                starts_inside=think is not None and think.inside,
                                parallel_tool_calls=body.parallel_tool_calls is not False,
                                forced_call=forces_call(body))
    return parser if (parser.reasoning or parser.tools) else None


def delta_json(event: Event) -> dict[str, Any] | None:
    """The chat.completion.chunk delta for one parser event (None: nothing to send)."""
    if isinstance(event, ContentDelta):
        return {"content": event.text}
    if isinstance(event, ReasoningDelta):
        return {"reasoning_content": event.text}
    if isinstance(event, ToolCallStart):
        return {"tool_calls": [{"index": event.index, "id": event.id, "type": "function",
                                "function": {"name": event.name, "arguments": ""}}]}
    if isinstance(event, ToolCallArgsDelta):
        return {"tool_calls": [{"index": event.index, "function": {"arguments": event.text}}]}
    return None


class ChatReply:
    """Per-request parsing state; `calls` tells the finish reason."""

    def __init__(self, parser: ReplyParser | None) -> None:
        self.parser = parser
        self.calls = False

    def feed(self, text: str) -> list[dict[str, Any]]:
        if self.parser is None:
            return [{"content": text}] if text else []
        return self._deltas(self.parser.feed(text))

    def end(self) -> list[dict[str, Any]]:
        return [] if self.parser is None else self._deltas(self.parser.end())

    def _deltas(self, events: list[Event]) -> list[dict[str, Any]]:
        out = []
        for event in events:
            self.calls |= isinstance(event, ToolCallStart)
            delta = delta_json(event)
            if delta is not None:
                out.append(delta)
        return out

    def message(self, text: str) -> dict[str, Any]:
        """The whole reply as a chat message."""
        if self.parser is None:
            return {"role": "assistant", "content": text}
        reply = self.parser.parse(text)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or (None if reply.calls else "")}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.calls:
            self.calls = True
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}}
                                     for c in reply.calls]
        return message
