"""Qwen XML tool calls (Qwen3-Coder, Qwen3.5 and later).

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

A call is valid once `<tool_call>`, optional whitespace, `<function=NAME>`
has arrived and NAME is an offered tool: ToolCallStart goes out then, and
from there on the block is that call whatever follows (a reply cut short
still ends the call, with what its arguments had). Anything else after
`<tool_call>` (another format, an unoffered name, a name that never closes)
makes the opener answer text.

Values. The template writes `<parameter=K>\\n` + value + `\\n</parameter>`, so
exactly one newline right after `<parameter=K>` and exactly one right before
the value's end are dropped; every other character of the value is kept.
Values convert by the offered schema (schema.py); a string value streams
as it arrives, a typed one goes out when it ends. A value ends at
`</parameter>`, or, when that is missing, at the next `<parameter=`,
`</function>` or `</tool_call>`; a reply cut short inside an end marker drops
the marker's partial text. Text between parameters is ignored, and a
repeated parameter keeps its first value. After `</function>`, whitespace
and `</tool_call>` are consumed; another `<function=` there opens a second
call in the same block.
"""

from __future__ import annotations

from .base import MAX_NAME, ToolParser
from .scan import find_first, partial_suffix, skip_ws

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
FUNC = "<function="
FUNC_END = "</function>"
PARAM = "<parameter="
PARAM_END = "</parameter>"

_BODY = (PARAM, FUNC_END, CLOSE)
_VALUE_END = (PARAM_END, PARAM, FUNC_END, CLOSE)


class QwenXmlParser(ToolParser):
    name = "qwen_xml"
    openers = (OPEN,)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._first = False            # the value's first character is still to come

    def _step(self, final: bool) -> bool:
        state = self._state
        if state == "content":
            return self._scan_content(final)
        if state == "open":
            return self._open(final, len(OPEN))
        if state == "inner":
            return self._open(final, 0)
        if state == "body":
            return self._body(final)
        if state == "value":
            return self._value(final)
        return self._after(final)

    def _not_call(self, at: int) -> bool:
        if at:
            return self._reject(at)
        self._state = "content"        # a second <function= that isn't a call: plain text
        return True

    def _open(self, final: bool, at: int) -> bool:
        """buf[at:] should be whitespace, then <function=NAME>."""
        buf = self._buf
        j = skip_ws(buf, at)
        if j - at > MAX_NAME:
            return self._not_call(at)
        rest = buf[j:len(FUNC) + j]
        if not rest.startswith(FUNC):
            if FUNC.startswith(rest) and not final:
                return False
            return self._not_call(at)
        start = j + len(FUNC)
        k = buf.find(">", start)
        if k == -1:
            partial = buf[start:]
            if final or len(partial) > MAX_NAME or "\n" in partial or "<" in partial:
                return self._not_call(at)
            return False
        raw = buf[start:k]
        name = raw.strip()
        if "\n" in raw or "<" in raw or len(raw) > MAX_NAME or name not in self.tools:
            return self._not_call(at)
        self._buf = buf[k + 1:]
        self._start_call(name)
        self._state = "body"
        return True

    def _body(self, final: bool) -> bool:
        buf = self._buf
        pos, marker = find_first(buf, _BODY)
        if pos == -1:
            if final:
                self._buf = ""
                self._close_call()
                self._state = "content"
                return True
            keep = partial_suffix(buf, _BODY)
            self._buf = buf[len(buf) - keep:]      # stray text between parameters goes
            return False
        if marker == PARAM:
            start = pos + len(PARAM)
            k = buf.find(">", start)
            key = buf[start:k] if k != -1 else buf[start:]
            if "\n" in key or "<" in key or len(key) > MAX_NAME or (k == -1 and final):
                self._buf = buf[start:]              # not a parameter after all: skip the marker
                return True
            if k == -1:
                self._buf = buf[pos:]
                return False
            self._buf = buf[k + 1:]
            self._value_begin(key.strip())
            self._first = True
            self._state = "value"
            return True
        self._buf = buf[pos + len(marker):]
        self._close_call()
        self._state = "after" if marker == FUNC_END else "content"
        return True

    def _value(self, final: bool) -> bool:
        buf = self._buf
        if self._first:
            if not buf and not final:
                return False
            self._first = False
            if buf.startswith("\n"):
                buf = buf[1:]
        pos, marker = find_first(buf, _VALUE_END)
        if pos == -1 and not final:
            safe = len(buf) - partial_suffix(buf, _VALUE_END)
            if safe and buf[safe - 1] == "\n":
                safe -= 1                            # may be the newline before the end
            self._value_text(buf[:safe])
            self._buf = buf[safe:]
            return False
        if pos == -1:                                # cut short: a partial end marker goes
            raw, rest = buf[:len(buf) - partial_suffix(buf, _VALUE_END)], ""
        else:
            raw = buf[:pos]
            rest = buf[pos + len(PARAM_END):] if marker == PARAM_END else buf[pos:]
        if raw.endswith("\n"):
            raw = raw[:-1]
        self._value_text(raw)
        self._value_end()
        self._buf = rest
        self._state = "body"
        return True

    def _after(self, final: bool) -> bool:
        """After </function>: whitespace and </tool_call>, or a second <function=."""
        buf = self._buf
        j = skip_ws(buf, 0)
        rest = buf[j:]
        if j > MAX_NAME:
            return self._leave_after()
        if not rest:
            if final:
                self._buf = ""
                self._state = "content"
                return True
            return False
        if rest.startswith(CLOSE):
            self._buf = rest[len(CLOSE):]
            self._state = "content"
            return True
        if rest.startswith(FUNC):
            self._buf = rest
            self._state = "inner"
            return True
        if not final and (CLOSE.startswith(rest) or FUNC.startswith(rest)):
            return False
        return self._leave_after()

    def _leave_after(self) -> bool:
        self._state = "content"
        return True

