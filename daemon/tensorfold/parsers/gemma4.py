"""Gemma 4 tool calls.

Assumed format (Gemma 4's chat template and its special tokens):

    <|tool_call>call:NAME{key:VALUE,key:VALUE}<tool_call|>

* Strings are wrapped in the `<|"|>` token: `city:<|"|>Paris, FR<|"|>`;
  inside them any text is literal, markers included. JSON-quoted strings
  ("...") are read too.
* Keys are bare (`city`) or quoted like strings.
* Numbers are JSON numbers, `true`/`false`/`null` are literals, arrays are
  `[v,v]` and objects `{k:v}` nest; whitespace between tokens is allowed.
* Several calls follow each other as separate blocks.

The block is held until its `<tool_call|>` (outside strings) arrives, then a
call to an offered tool goes out whole. Text right after the opener that is
not `call:`, an unoffered name, a bare word where a value belongs, anything
after the closing brace, a second `<|tool_call>` before the close, or a reply
ending inside the block make the opener answer text.
"""

from __future__ import annotations

import json
import math
import re

from .base import MAX_NAME, ToolParser
from .scan import find_first, partial_suffix, skip_ws

OPEN = "<|tool_call>"
CLOSE = "<tool_call|>"
QUOTE = '<|"|>'
CALL = "call:"

_OUTSIDE = (QUOTE, CLOSE, OPEN)
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_BARE_KEY = re.compile(r"[^:{}\[\],<\"\s]+")
_SCALAR = re.compile(r"[^,{}\[\]<\"\s]+")
_INT = re.compile(r"-?[0-9]+")
_NUM = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_JSON = json.JSONDecoder()


class _Malformed(ValueError):
    pass


class _Args:
    """A recursive-descent reader of the argument object."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def ws(self) -> None:
        self.i = skip_ws(self.s, self.i)

    def peek(self) -> str:
        self.ws()
        if self.i >= len(self.s):
            raise _Malformed("unexpected end")
        return self.s[self.i]

    def string(self) -> str:
        s, i = self.s, self.i
        if s.startswith(QUOTE, i):
            j = s.find(QUOTE, i + len(QUOTE))
            if j == -1:
                raise _Malformed("unclosed string")
            self.i = j + len(QUOTE)
            return s[i + len(QUOTE):j]
        try:
            value, self.i = _JSON.raw_decode(s, i)
        except ValueError:
            raise _Malformed("bad string") from None
        return value

    def value(self) -> object:
        c = self.peek()
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c == '"' or self.s.startswith(QUOTE, self.i):
            return self.string()
        m = _SCALAR.match(self.s, self.i)
        if m is None:
            raise _Malformed("no value")
        self.i = m.end()
        tok = m.group()
        if tok in ("true", "false"):
            return tok == "true"
        if tok == "null":
            return None
        if _INT.fullmatch(tok):
            return int(tok)
        if _NUM.fullmatch(tok):
            v = float(tok)
            if math.isfinite(v):
                return v
        raise _Malformed(f"bare word {tok!r}")

    def key(self) -> str:
        c = self.peek()
        if c == '"' or self.s.startswith(QUOTE, self.i):
            return self.string()
        m = _BARE_KEY.match(self.s, self.i)
        if m is None:
            raise _Malformed("no key")
        self.i = m.end()
        return m.group()

    def obj(self) -> dict:
        self.i += 1
        out: dict = {}
        if self.peek() == "}":
            self.i += 1
            return out
        while True:
            key = self.key()
            if self.peek() != ":":
                raise _Malformed("no colon")
            self.i += 1
            out[key] = self.value()
            c = self.peek()
            self.i += 1
            if c == "}":
                return out
            if c != ",":
                raise _Malformed("no comma")

    def arr(self) -> list:
        self.i += 1
        out: list = []
        if self.peek() == "]":
            self.i += 1
            return out
        while True:
            out.append(self.value())
            c = self.peek()
            self.i += 1
            if c == "]":
                return out
            if c != ",":
                raise _Malformed("no comma")


def read_call(body: str) -> tuple[str, dict] | None:
    """(name, arguments) from the text between the markers, or None."""
    body = body.strip()
    if not body.startswith(CALL):
        return None
    brace = body.find("{")
    if brace == -1:
        return None
    name = body[len(CALL):brace].strip()
    if not _NAME.fullmatch(name):
        return None
    reader = _Args(body)
    reader.i = brace
    try:
        args = reader.obj()
        reader.ws()
    except _Malformed:
        return None
    if reader.i != len(body):
        return None
    return name, args


class Gemma4Parser(ToolParser):
    name = "gemma4"
    openers = (OPEN,)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pos = 0            # where scanning of the held block resumes
        self._in_str = False
        self._named = False

    def _step(self, final: bool) -> bool:
        if self._state == "content":
            return self._scan_content(final)
        return self._block(final)

    def _drop(self) -> bool:
        self._named = False
        return self._reject(len(OPEN))

    def _block(self, final: bool) -> bool:
        buf = self._buf
        if not self._named:
            j = skip_ws(buf, len(OPEN))
            head = buf[j:j + len(CALL)]
            if head != CALL or j - len(OPEN) > MAX_NAME:
                if not final and CALL.startswith(head) and j - len(OPEN) <= MAX_NAME:
                    return False
                return self._drop()
            self._named = True
            self._pos = j + len(CALL)
            self._in_str = False
        i = self._pos
        while True:
            if self._in_str:
                p = buf.find(QUOTE, i)
                if p == -1:
                    self._pos = len(buf) - partial_suffix(buf, (QUOTE,), i)
                    return self._drop() if final else False
                self._in_str = False
                i = p + len(QUOTE)
                continue
            p, marker = find_first(buf, _OUTSIDE, i)
            if p == -1:
                self._pos = len(buf) - partial_suffix(buf, _OUTSIDE, i)
                return self._drop() if final else False
            if marker == QUOTE:
                self._in_str = True
                i = p + len(QUOTE)
                continue
            if marker == OPEN:
                return self._drop()
            call = read_call(buf[len(OPEN):p])
            if call is None or call[0] not in self.tools:
                return self._drop()
            self._named = False
            self._buf = buf[p + len(CLOSE):]
            self._state = "content"
            self._whole_call(*call)
            return True
