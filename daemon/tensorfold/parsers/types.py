"""What the parsers produce: plain values, no framework types.

A parser turns reply text into a stream of events. Five kinds exist:

* `ContentDelta(text)`: answer text (`message.content` / `delta.content`).
* `ReasoningDelta(text)`: thinking text (`reasoning_content`).
* `ToolCallStart(index, id, name)`: a call opens; `index` counts the reply's
  calls from 0 and `id` is "call_<random>" unless the parser was given an id
  generator.
* `ToolCallArgsDelta(index, text)`: the next piece of the call's arguments;
  the pieces of one call concatenate to one JSON object text.
* `ToolCallEnd(index)`: the call is complete; nothing more comes for `index`.

A call's events always come in the order start, args deltas, end, and the
calls never interleave. Text deltas are never empty. `collect()` folds a list
of events into a `Reply` (content, reasoning, calls): streaming a reply in any
chunking and collecting it gives the same `Reply` as parsing it whole.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(slots=True, frozen=True)
class ContentDelta:
    text: str


@dataclass(slots=True, frozen=True)
class ReasoningDelta:
    text: str


@dataclass(slots=True, frozen=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(slots=True, frozen=True)
class ToolCallArgsDelta:
    index: int
    text: str


@dataclass(slots=True, frozen=True)
class ToolCallEnd:
    index: int


Event = ContentDelta | ReasoningDelta | ToolCallStart | ToolCallArgsDelta | ToolCallEnd


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str          # one JSON object, as text


@dataclass(slots=True)
class Reply:
    """A whole parsed reply."""

    content: str = ""
    reasoning: str = ""
    calls: list[ToolCall] = field(default_factory=list)


_ALPHABET = string.ascii_letters + string.digits


def new_call_id() -> str:
    """The default call id: "call_" and 24 random letters and digits."""
    return "call_" + "".join(secrets.choice(_ALPHABET) for _ in range(24))


def collect(events: Iterable[Event]) -> Reply:
    """Fold events into one Reply."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, tuple[ToolCall, list[str]]] = {}
    for e in events:
        if isinstance(e, ContentDelta):
            content.append(e.text)
        elif isinstance(e, ReasoningDelta):
            reasoning.append(e.text)
        elif isinstance(e, ToolCallStart):
            calls[e.index] = (ToolCall(e.id, e.name, ""), [])
        elif isinstance(e, ToolCallArgsDelta):
            calls[e.index][1].append(e.text)
    out = []
    for index in sorted(calls):
        call, parts = calls[index]
        call.arguments = "".join(parts)
        out.append(call)
    return Reply("".join(content), "".join(reasoning), out)


def coalesce(events: Iterable[Event]) -> list[Event]:
    """Merge neighbouring text deltas of one kind (and one call); drop empty ones."""
    out: list[Event] = []
    for e in events:
        if isinstance(e, (ContentDelta, ReasoningDelta, ToolCallArgsDelta)):
            if not e.text:
                continue
            last = out[-1] if out else None
            if type(last) is type(e):
                if isinstance(e, ToolCallArgsDelta):
                    if last.index == e.index:
                        out[-1] = ToolCallArgsDelta(e.index, last.text + e.text)
                        continue
                else:
                    out[-1] = type(e)(last.text + e.text)
                    continue
        out.append(e)
    return out


class FirstCallOnly:
    """parallel_tool_calls: false. Content and reasoning pass straight through;
    the first call's events are held until its ToolCallEnd and then released
    together; every later call is dropped. Stateful: one per reply."""

    def __init__(self) -> None:
        self._held: list[Event] = []
        self._done = False

    def filter(self, events: Iterable[Event]) -> list[Event]:
        out: list[Event] = []
        for e in events:
            if isinstance(e, (ContentDelta, ReasoningDelta)):
                out.append(e)
            elif not self._done:
                self._held.append(e)
                if isinstance(e, ToolCallEnd):
                    out.extend(self._held)
                    self._held = []
                    self._done = True
        return coalesce(out)


def first_call_only(events: Iterable[Event]) -> list[Event]:
    """A whole reply's events with only its first completed call kept."""
    return FirstCallOnly().filter(events)
