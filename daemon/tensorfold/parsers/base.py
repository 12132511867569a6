"""The shared mechanics of the tool-call parsers.

Every tool parser has the same surface:

    p = QwenXmlParser(tools, new_id=None, parallel_tool_calls=True)
    p.feed(text) -> list[Event]      # the next piece of the reply
    p.end() -> list[Event]           # the reply is over
    p.parse(text) -> (content, calls)  # a whole reply, on a fresh parser

A parser is one state machine over a buffer of unread text. Answer text is
written as soon as it cannot be part of a call marker; from an opener on,
text is held until the parser knows whether a valid call to an offered tool
starts there. If not, the opener's text is answer text and scanning resumes
right after it, so a malformed or unoffered block keeps all its text as
content. Whole parsing is the same machine fed once, and the machine never
looks at chunk boundaries, so streamed and whole results are equal.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from .scan import ContentOut, StepMachine, find_first, partial_suffix
from .schema import convert, param_type, tool_schemas
from .types import (ContentDelta, Event, FirstCallOnly, ToolCall, ToolCallArgsDelta, ToolCallEnd,
                    ToolCallStart, coalesce, collect, new_call_id)

# Longest function or parameter name (and whitespace run inside an opener) a
# parser holds while it waits for the marker that ends it.
MAX_NAME = 256


class ArgsJson:
    """Writes one call's arguments object as text, key by key, in the form
    json.dumps(dict, ensure_ascii=False) gives. A repeated key is dropped."""

    def __init__(self) -> None:
        self._keys: set[str] = set()

    def key(self, key: str) -> str | None:
        if key in self._keys:
            return None
        prefix = ", " if self._keys else "{"
        self._keys.add(key)
        return prefix + json.dumps(key, ensure_ascii=False) + ": "

    def close(self) -> str:
        return "}" if self._keys else "{}"


class ToolParser(StepMachine):
    """Base of the tool-call parsers; subclasses write `_step` states."""

    name: ClassVar[str] = ""
    openers: ClassVar[tuple[str, ...]] = ()

    def __init__(self, tools: Iterable[Mapping[str, Any]] | Mapping[str, Any] | None = None, *,
                 new_id: Callable[[], str] | None = None, parallel_tool_calls: bool = True,
                 forced: bool = False) -> None:
        self.tools = tool_schemas(tools)
        self.new_id = new_id or new_call_id
        self.parallel_tool_calls = parallel_tool_calls
        self.forced = forced               # the request forced a call: a cut-off one still goes out
        self._buf = ""
        self._state = "content"
        self._out: list[Event] = []
        self._content = ContentOut(lambda s: self._out.append(ContentDelta(s)))
        self._filter = None if parallel_tool_calls else FirstCallOnly()
        self._calls = 0
        self._index = -1                   # the open call, or -1
        self._schema: dict = {}
        self._args = ArgsJson()
        self._value_open = False
        self._vskip = False
        self._vtype: str | None = None
        self._vprefix = ""
        self._vparts: list[str] = []

    # -- the surface -----------------------------------------------------

    def end(self) -> list[Event]:
        self._drain()
        if self._index >= 0:
            self._close_call()
        self._buf = ""
        self._content.end()
        return self._take()

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        fresh = type(self)(self.tools, new_id=self.new_id, parallel_tool_calls=self.parallel_tool_calls,
                           forced=self.forced)
        reply = collect(fresh.feed(text) + fresh.end())
        return reply.content, reply.calls

    # -- for subclasses --------------------------------------------------

    def _step(self, final: bool) -> bool:
        """Advance the machine; True when it made progress and should run again."""
        raise NotImplementedError

    def _take(self) -> list[Event]:
        out = coalesce(self._out)
        self._out.clear()
        return self._filter.filter(out) if self._filter else out

    def _scan_content(self, final: bool) -> bool:
        """Answer text up to the next opener; at an opener, state "open"."""
        buf = self._buf
        pos, _ = find_first(buf, self.openers)
        if pos >= 0:
            self._content.text(buf[:pos])
            self._buf = buf[pos:]
            self._state = "open"
            return True
        keep = 0 if final else partial_suffix(buf, self.openers)
        cut = len(buf) - keep
        self._content.text(buf[:cut])
        self._buf = buf[cut:]
        return False

    def _reject(self, n: int) -> bool:
        """The held block is not a call: its first n characters (the opener)
        are answer text, and scanning resumes after them."""
        self._content.text(self._buf[:n])
        self._buf = self._buf[n:]
        self._state = "content"
        return True

    def _start_call(self, name: str) -> None:
        self._content.call()
        self._index = self._calls
        self._calls += 1
        self._schema = self.tools.get(name, {})
        self._args = ArgsJson()
        self._out.append(ToolCallStart(self._index, self.new_id(), name))

    def _args_text(self, text: str) -> None:
        if text:
            self._out.append(ToolCallArgsDelta(self._index, text))

    def _close_call(self) -> None:
        if self._value_open:
            self._value_end()
        self._args_text(self._args.close())
        self._out.append(ToolCallEnd(self._index))
        self._index = -1

    def _whole_call(self, name: str, arguments: dict) -> None:
        self._start_call(name)
        self._args_text(json.dumps(arguments, ensure_ascii=False))
        self._out.append(ToolCallEnd(self._index))
        self._index = -1

    # Text parameter values (Qwen XML, GLM): a value that stays a string
    # streams as it comes; a typed value is held until it ends.

    def _value_begin(self, key: str) -> None:
        prefix = self._args.key(key)
        self._value_open = True
        self._vskip = prefix is None
        self._vtype = param_type(self._schema, key)
        self._vparts = []
        self._vprefix = prefix or ""
        if not self._vskip and self._vtype is None:
            self._args_text(self._vprefix + '"')

    def _value_text(self, text: str) -> None:
        if self._vskip or not text:
            return
        if self._vtype is None:
            self._args_text(json.dumps(text, ensure_ascii=False)[1:-1])
        else:
            self._vparts.append(text)

    def _value_end(self) -> None:
        self._value_open = False
        if self._vskip:
            return
        if self._vtype is None:
            self._args_text('"')
        else:
            value = convert("".join(self._vparts), self._vtype)
            self._args_text(self._vprefix + json.dumps(value, ensure_ascii=False))
