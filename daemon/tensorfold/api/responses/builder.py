"""Responses output items, built from a reply's events, streamed or whole.

A reply reaches the builder in the parsers' event language
(tensorfold.parsers.types), whatever produced it:

    ReasoningDelta(text)                thinking text (reasoning_content in chat)
    ContentDelta(text)                  answer text (content in chat)
    ToolCallStart(index, id, name)      a call opens
    ToolCallArgsDelta(index, text)      a fragment of its JSON arguments
    ToolCallEnd(index)                  the call is complete

The request's reply parser (parsers.ReplyParser, built by the chat path's
chat_reply.reply_parser) yields exactly these from the reply text; `PlainText`
stands in when the reply is all answer text. `chat_delta_events` reads them
from a chat delta ({"reasoning_content", "content", "tool_calls": [{"index",
"id", "function": {"name", "arguments"}}]}; a whole chat message reads the
same way).

`OutputBuilder.feed` turns events into output items (reasoning, message,
function_call: a new item starts whenever the kind changes, and a call's item
closes at its ToolCallEnd) and, when it has an `EventLog`, into the typed
stream events of each item: output_item.added, content_part.added, the
deltas, their .done, content_part.done and output_item.done, each with the
next sequence number. A whole reply is the same builder without a log, so
streamed and whole replies hold the same items.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...parsers.types import ContentDelta, ReasoningDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart


ReplyEvent = ContentDelta | ReasoningDelta | ToolCallStart | ToolCallArgsDelta | ToolCallEnd


def item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def chat_delta_events(delta: Mapping[str, Any]) -> Iterator[ReplyEvent]:
    """The events of one chat delta (or one whole chat message): reasoning,
    then content, then tool-call fragments, as chat orders them."""
    if delta.get("reasoning_content"):
        yield ReasoningDelta(delta["reasoning_content"])
    if delta.get("content"):
        yield ContentDelta(delta["content"])
    for position, call in enumerate(delta.get("tool_calls") or ()):
        index = call.get("index", position)
        function = call.get("function") or {}
        if function.get("name") is not None:
            yield ToolCallStart(index, call.get("id") or item_id("call"), function["name"])
        if function.get("arguments"):
            yield ToolCallArgsDelta(index, function["arguments"])


class PlainText:
    """The reply parser of a reply that is all answer text (no reasoning
    markers, no tools): the parsers' feed/end surface."""

    def feed(self, text: str) -> list[ReplyEvent]:
        return [ContentDelta(text)] if text else []

    def end(self) -> list[ReplyEvent]:
        return []


class EventLog:
    """Typed stream events with contiguous sequence numbers from 0."""

    def __init__(self) -> None:
        self.next = 0

    def make(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.next, **fields}
        self.next += 1
        return event


@dataclass(slots=True)
class _Item:
    kind: str                          # "reasoning" | "message" | "function_call"
    body: dict[str, Any]               # the item as output lists it (text filled at close)
    index: int                         # output_index
    parts: list[str] = field(default_factory=list)
    call: int | None = None            # tool-call index for function_call items


class OutputBuilder:
    def __init__(self, log: EventLog | None = None) -> None:
        self.log = log
        self.items: list[_Item] = []
        self._open: _Item | None = None
        self._calls: dict[int, _Item] = {}

    @property
    def output(self) -> list[dict[str, Any]]:
        return [item.body for item in self.items]

    def feed(self, event: ReplyEvent) -> list[dict[str, Any]]:
        """Take one reply event; the stream events it makes (none without a log)."""
        out: list[dict[str, Any]] = []
        if isinstance(event, ToolCallStart):
            if event.index in self._calls:
                raise ValueError(f"tool call {event.index} started twice")
            self._close(out, "completed")
            self._start(out, "function_call", call=event.index, call_id=event.id, name=event.name)
            return out
        if isinstance(event, (ToolCallArgsDelta, ToolCallEnd)):
            item = self._calls.get(event.index)
            if item is None or item is not self._open:
                raise ValueError(f"tool call {event.index} is not the open call")
            if isinstance(event, ToolCallEnd):
                self._close(out, "completed")
            elif event.text:
                item.parts.append(event.text)
                self._emit(out, "response.function_call_arguments.delta", item, delta=event.text)
            return out
        if not event.text:
            return out
        kind = "reasoning" if isinstance(event, ReasoningDelta) else "message"
        if self._open is None or self._open.kind != kind:
            self._close(out, "completed")
            self._start(out, kind)
        item = self._open
        item.parts.append(event.text)
        delta = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        self._emit(out, delta, item, content_index=0, delta=event.text,
                   **({} if kind == "reasoning" else {"logprobs": []}))
        return out

    def finish(self, status: str = "completed") -> list[dict[str, Any]]:
        """Close the open item with `status` ("completed", or "incomplete" for
        a reply cut short). A reply with no item at all gets an empty message."""
        out: list[dict[str, Any]] = []
        if not self.items:
            self._start(out, "message")
        self._close(out, status)
        return out

    # -- items -----------------------------------------------------------

    def _start(self, out: list[dict[str, Any]], kind: str, *, call: int | None = None,
               call_id: str = "", name: str = "") -> None:
        if kind == "reasoning":
            body = {"id": item_id("rs"), "type": "reasoning", "summary": [], "content": [],
                    "status": "in_progress"}
        elif kind == "message":
            body = {"id": item_id("msg"), "type": "message", "role": "assistant", "status": "in_progress",
                    "content": []}
        else:
            body = {"id": item_id("fc"), "type": "function_call", "call_id": call_id, "name": name,
                    "arguments": "", "status": "in_progress"}
        item = _Item(kind, body, len(self.items), call=call)
        self.items.append(item)
        self._open = item
        if call is not None:
            self._calls[call] = item
        if self.log is None:
            return
        out.append(self.log.make("response.output_item.added", output_index=item.index, item=_copy(body)))
        if kind != "function_call":
            self._emit(out, "response.content_part.added", item, content_index=0, part=_part(kind, ""))

    def _close(self, out: list[dict[str, Any]], status: str) -> None:
        item, self._open = self._open, None
        if item is None:
            return
        text = "".join(item.parts)
        body = item.body
        body["status"] = status
        if item.kind == "function_call":
            body["arguments"] = text
            self._emit(out, "response.function_call_arguments.done", item, arguments=text)
        else:
            part = _part(item.kind, text)
            body["content"] = [part]
            if item.kind == "reasoning":
                self._emit(out, "response.reasoning_text.done", item, content_index=0, text=text)
            else:
                self._emit(out, "response.output_text.done", item, content_index=0, text=text, logprobs=[])
            self._emit(out, "response.content_part.done", item, content_index=0, part=_copy(part))
        if self.log is not None:
            out.append(self.log.make("response.output_item.done", output_index=item.index, item=_copy(body)))

    def _emit(self, out: list[dict[str, Any]], kind: str, item: _Item, **fields: Any) -> None:
        if self.log is not None:
            out.append(self.log.make(kind, item_id=item.body["id"], output_index=item.index, **fields))


def _part(kind: str, text: str) -> dict[str, Any]:
    if kind == "reasoning":
        return {"type": "reasoning_text", "text": text}
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _copy(body: dict[str, Any]) -> dict[str, Any]:
    """A snapshot of an item for an event (the item itself changes later)."""
    return {k: ([dict(p) for p in v] if isinstance(v, list) else v) for k, v in body.items()}
