"""Small text-scanning helpers shared by the parsers.

* `find_first` / `partial_suffix`: find the earliest of several markers, and
  how much of a buffer's tail must be held back because it could be the start
  of one (so a marker split across chunks is still found).
* `ContentOut`: where a tool parser writes answer text; it drops the
  whitespace that only separates the answer from a call block.
* `EdgeTrim`: strips whitespace at both edges of a streamed segment.
* `JsonExtent`: finds, chunk by chunk, where a JSON object or array ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

WS = " \t\r\n"


def find_first(buf: str, markers: Sequence[str], start: int = 0) -> tuple[int, str]:
    """(position, marker) of the earliest marker in buf[start:], or (-1, "")."""
    best, which = -1, ""
    for m in markers:
        i = buf.find(m, start)
        if i != -1 and (best == -1 or i < best or (i == best and len(m) > len(which))):
            best, which = i, m
    return best, which


def partial_suffix(buf: str, markers: Sequence[str], start: int = 0) -> int:
    """Length of the longest tail of buf[start:] that is a proper prefix of a marker."""
    n = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(buf) - start), n, -1):
            if buf.endswith(m[:k]):
                n = k
                break
    return n


def skip_ws(buf: str, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in WS:
        i += 1
    return i


class StepMachine:
    """The driver of a streaming parser: `feed` appends text to `_buf` and runs
    `_step(final=False)` while it makes progress; `_drain` runs `_step(True)`
    at the end of the reply. Subclasses hold `_buf` and define `_step` and `_take`."""

    _buf: str

    def _step(self, final: bool) -> bool:
        raise NotImplementedError

    def _take(self) -> list:
        raise NotImplementedError

    def feed(self, text: str) -> list:
        if text:
            self._buf += text
            while self._step(False):
                pass
        return self._take()

    def _drain(self) -> None:
        while self._step(True):
            pass


class ContentOut:
    """Answer text around tool calls.

    Whitespace that touches a call block is dropped: the whitespace before a
    call, the whitespace after the last call, and whitespace after a call when
    no answer text came before it. Whitespace between answer text and later
    answer text (with a call in between) is kept once. With no call in a reply
    the content is the text exactly. The rule only looks at the concatenated
    text and where the calls sit, so it does not depend on chunking."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._pending = ""          # trailing whitespace not yet known to be kept
        self._any = False           # some answer text has been emitted
        self._after_call = False    # the last thing was a call

    def text(self, s: str) -> None:
        if not s:
            return
        body = s.rstrip(WS)
        if not body:
            self._pending += s
            return
        core = body.lstrip(WS)
        pending = self._pending + body[:len(body) - len(core)]
        if self._after_call and not self._any:
            pending = ""
        out = pending + core
        self._pending = s[len(body):]
        self._any = True
        self._after_call = False
        self._emit(out)

    def call(self) -> None:
        self._pending = ""
        self._after_call = True

    def end(self) -> None:
        if not self._after_call and self._pending:
            self._emit(self._pending)
        self._pending = ""


class EdgeTrim:
    """Streams a segment with its leading and trailing whitespace removed."""

    def __init__(self) -> None:
        self._started = False
        self._pending = ""

    def push(self, s: str) -> str:
        if not self._started:
            s = s.lstrip(WS)
            if not s:
                return ""
            self._started = True
        body = s.rstrip(WS)
        if not body:
            self._pending += s
            return ""
        out = self._pending + body
        self._pending = s[len(body):]
        return out

    def drop(self) -> None:
        """The segment ended: its trailing whitespace goes."""
        self._pending = ""


_BARE = set(WS) | set("0123456789-+.eE") | set("truefalsn")
_PAIRS = {"}": "{", "]": "["}
BAD = -1


class JsonExtent:
    """Where a JSON object or array starting at `base` ends, fed incrementally.

    `scan(buf)` continues from where it stopped (buf only grows) and returns
    the end index (exclusive) once the value is complete, None while more text
    is needed, or BAD on a character or bracket JSON cannot have there. It
    checks structure only; json.loads decides the rest."""

    def __init__(self, base: int) -> None:
        self._pos = base
        self._stack: list[str] = []
        self._in_str = False
        self._esc = False
        self._end: int | None = None

    def scan(self, buf: str) -> int | None:
        if self._end is not None:
            return self._end
        i, n = self._pos, len(buf)
        stack = self._stack
        while i < n:
            c = buf[i]
            if self._in_str:
                if self._esc:
                    self._esc = False
                elif c == "\\":
                    self._esc = True
                elif c == '"':
                    self._in_str = False
                elif c < " ":
                    return BAD
            elif c == '"':
                if not stack:
                    return BAD
                self._in_str = True
            elif c in "{[":
                stack.append(c)
            elif c in "}]":
                if not stack or stack.pop() != _PAIRS[c]:
                    return BAD
                if not stack:
                    self._end = i + 1
                    return i + 1
            elif c in ",:":
                if not stack:
                    return BAD
            elif c not in _BARE or not stack:
                return BAD
            i += 1
        self._pos = i
        return None
