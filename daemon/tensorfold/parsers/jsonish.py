"""Plain JSON tool calls, as Qwen2.5-Coder and templates without markers write them.

    {"name": "NAME", "arguments": {...}}
    [{"name": "A", "arguments": {...}}, {"name": "B", "arguments": {...}}]
    ```json
    {"name": "NAME", "arguments": {...}}
    ```

A candidate starts a line (after spaces or tabs): `{`, `[`, or a ``` fence
whose info string is empty, json, tool_call or tool_calls and whose body is
one JSON value (a reply may end before the closing fence). A bare value must
be the rest of its line. The candidate is a call only when it is one call
object naming an offered tool with an "arguments" (or "parameters") object,
or a non-empty list of them; anything else, structured answers included,
stays answer text. Text is held only while a candidate can still become a
call: the first key must be "name", "arguments" or "parameters", and a
first-key "name" must be offered. A rejected fence is text, and the lines in
it are read again as candidates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .base import ToolParser
from .scan import BAD, JsonExtent, skip_ws
from .schema import call_from_json, loads

FENCE = "```"
_INFOS = ("", "json", "tool_call", "tool_calls")
_FIRST_KEY = re.compile(r'\[?\s*\{\s*"((?:[^"\\]|\\.)*)"\s*:\s*(\S)')
_CALL_KEYS = ("name", "arguments", "parameters")


def early_check(text: str, tools: Mapping[str, dict]) -> bool | None:
    """For a held JSON candidate `text` (starting at its { or [): True when it
    already cannot be a call, False when its start looks like one, None when
    too little has arrived to say."""
    if text.startswith("["):
        j = skip_ws(text, 1)
        if j < len(text) and text[j] != "{":
            return True
    m = _FIRST_KEY.match(text)
    if m is None:
        return None
    try:
        key = loads('"' + m.group(1) + '"')
    except ValueError:
        return True
    if key not in _CALL_KEYS:
        return True
    if key != "name":
        return False
    if m.group(2) != '"':
        return True
    end = text.find('"', m.end())
    while end != -1 and _escaped(text, end):
        end = text.find('"', end + 1)
    if end == -1:
        return None
    try:
        name = loads(text[m.end() - 1:end + 1])
    except ValueError:
        return True
    return name not in tools


def _escaped(text: str, i: int) -> bool:
    n = 0
    while i > 0 and text[i - 1] == "\\":
        n += 1
        i -= 1
    return n % 2 == 1


def calls_from_json(value: object, tools: Mapping[str, dict]) -> list[tuple[str, dict]] | None:
    items = value if isinstance(value, list) else [value]
    if not items:
        return None
    out = []
    for item in items:
        call = call_from_json(item, tools, need_arguments=True)
        if call is None:
            return None
        out.append(call)
    return out


class JsonCallParser(ToolParser):
    name = "json"
    openers = ()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._line_start = True
        self._extent: JsonExtent | None = None
        self._vstart = 0           # where the held JSON value starts in the buffer
        self._checked = False

    def _step(self, final: bool) -> bool:
        if self._state == "content":
            return self._lines(final)
        if self._state == "bare":
            return self._bare(final)
        return self._fence(final)

    def _lines(self, final: bool) -> bool:
        buf = self._buf
        i, n = 0, len(buf)
        while i < n:
            if self._line_start:
                j = i
                while j < n and buf[j] in " \t":
                    j += 1
                if j == n:
                    break
                c = buf[j]
                if c in "{[" or buf.startswith(FENCE, j):
                    self._content.text(buf[:j])
                    self._buf = buf[j:]
                    self._begin("bare" if c != "`" else "fence")
                    return True
                if c == "`" and FENCE.startswith(buf[j:j + 3]) and j + 3 > n:
                    break
                self._line_start = False
                i = j
            else:
                k = buf.find("\n", i)
                if k == -1:
                    i = n
                    break
                i = k + 1
                self._line_start = True
        cut = n if final else i
        self._content.text(buf[:cut])
        self._buf = buf[cut:]
        return False

    def _begin(self, state: str) -> None:
        self._state = state
        self._extent = None
        self._checked = False

    def _not_call(self, n: int) -> bool:
        self._extent = None
        self._line_start = False
        return self._reject(n)

    def _value(self, final: bool) -> int | None:
        """Scan the held value: its end, None for more, BAD when it can't be a call."""
        buf = self._buf
        end = self._extent.scan(buf)
        if end == BAD:
            return BAD
        if not self._checked:
            verdict = early_check(buf[self._vstart:], self.tools)
            if verdict:
                return BAD
            self._checked = verdict is False
        if end is None and final:
            return BAD
        return end

    def _bare(self, final: bool) -> bool:
        buf = self._buf
        if self._extent is None:
            self._vstart = 0
            self._extent = JsonExtent(0)
        end = self._value(final)
        if end == BAD:
            return self._not_call(1)
        if end is None:
            return False
        k = end
        while k < len(buf) and buf[k] in " \t\r":
            k += 1
        if k == len(buf) and not final:
            return False
        if k < len(buf) and buf[k] != "\n":
            return self._not_call(1)
        return self._accept(end, end)

    def _fence(self, final: bool) -> bool:
        buf = self._buf
        if self._extent is None:
            k = buf.find("\n", len(FENCE))
            if k == -1:
                if final or len(buf) - len(FENCE) > 64:
                    return self._not_call(len(FENCE))
                return False
            if k - len(FENCE) > 64 or buf[len(FENCE):k].strip().lower() not in _INFOS:
                return self._not_call(len(FENCE))
            j = skip_ws(buf, k + 1)
            if j - k > 64:
                return self._not_call(len(FENCE))
            if j == len(buf):
                return self._not_call(len(FENCE)) if final else False
            if buf[j] not in "{[":
                return self._not_call(len(FENCE))
            self._vstart = j
            self._extent = JsonExtent(j)
        end = self._value(final)
        if end == BAD:
            return self._not_call(len(FENCE))
        if end is None:
            return False
        k = skip_ws(buf, end)
        tail = buf[k:k + len(FENCE)]
        if tail == FENCE:
            return self._accept(end, k + len(FENCE))
        if final and not tail:                   # the reply ended before the closing fence
            return self._accept(end, k)
        if not final and FENCE.startswith(tail):
            return False
        return self._not_call(len(FENCE))

    def _accept(self, end: int, consumed: int) -> bool:
        buf = self._buf
        try:
            calls = calls_from_json(loads(buf[self._vstart:end]), self.tools)
        except ValueError:
            calls = None
        if calls is None:
            return self._not_call(1 if self._state == "bare" else len(FENCE))
        self._extent = None
        self._line_start = False
        self._buf = buf[consumed:]
        self._state = "content"
        for name, args in calls:
            self._whole_call(name, args)
        return True
