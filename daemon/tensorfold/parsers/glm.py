"""GLM tool calls (GLM-4.5 and later, GLM-5).

    <tool_call>NAME
    <arg_key>KEY</arg_key>
    <arg_value>VALUE</arg_value>
    </tool_call>

GLM-4.5/4.6 templates put newlines between the parts; GLM-4.7/5 write them
inline (`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`).
Both read the same way: NAME is the text after `<tool_call>` and any
whitespace, up to the next newline, `<arg_key>` or `</tool_call>`, stripped. The call is valid, and
ToolCallStart goes out, once that name is complete and offered; otherwise the
opener is answer text. The template writes string values raw and other values
with `tojson`, with no padding, so values are kept exactly (no newline
trimming) and typed by the offered schema like Qwen XML's (schema.py). Keys
are stripped. A value ends at `</arg_value>`, or, when that is missing, at the
next `<arg_key>` or `</tool_call>`; a key without a value is dropped, text
outside keys and values is ignored, and a repeated key keeps its first value.
A reply cut short still ends the open call.
"""

from __future__ import annotations

from .base import MAX_NAME, ToolParser
from .scan import find_first, partial_suffix, skip_ws

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
KEY = "<arg_key>"
KEY_END = "</arg_key>"
VALUE = "<arg_value>"
VALUE_END = "</arg_value>"

_NAME_END = ("\n", KEY, CLOSE)
_BODY = (KEY, CLOSE)
_BEFORE_VALUE = (VALUE, KEY, CLOSE)
_VALUE_ENDS = (VALUE_END, KEY, CLOSE)


class GlmParser(ToolParser):
    name = "glm"
    openers = (OPEN,)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._key = ""

    def _step(self, final: bool) -> bool:
        state = self._state
        if state == "content":
            return self._scan_content(final)
        if state == "open":
            return self._open(final)
        if state == "body":
            return self._body(final)
        if state == "key":
            return self._before_value(final)
        return self._value(final)

    def _open(self, final: bool) -> bool:
        buf = self._buf
        j = skip_ws(buf, len(OPEN))
        pos, marker = find_first(buf, _NAME_END, j) if j < len(buf) else (-1, "")
        if pos == -1:                       # the name is at least this long:
            if final or len(buf) - len(OPEN) - (len(CLOSE) - 1) > MAX_NAME:
                return self._reject(len(OPEN))
            return False
        if pos - len(OPEN) > MAX_NAME:
            return self._reject(len(OPEN))
        name = buf[j:pos].strip()
        if not name or "<" in name or name not in self.tools:
            return self._reject(len(OPEN))
        self._buf = buf[pos + 1:] if marker == "\n" else buf[pos:]
        self._start_call(name)
        self._state = "body"
        return True

    def _finish(self, rest: str) -> bool:
        self._buf = rest
        self._close_call()
        self._state = "content"
        return True

    def _body(self, final: bool) -> bool:
        buf = self._buf
        pos, marker = find_first(buf, _BODY)
        if pos == -1:
            if final:
                return self._finish("")
            self._buf = buf[len(buf) - partial_suffix(buf, _BODY):]
            return False
        if marker == CLOSE:
            return self._finish(buf[pos + len(CLOSE):])
        start = pos + len(KEY)
        k = buf.find(KEY_END, start)
        too_long = (k if k != -1 else len(buf) - (len(KEY_END) - 1)) - start > MAX_NAME
        if too_long or (k == -1 and final):
            self._buf = buf[start:]              # not a key after all: skip the marker
            return True
        if k == -1:
            self._buf = buf[pos:]
            return False
        self._key = buf[start:k].strip()
        self._buf = buf[k + len(KEY_END):]
        self._state = "key"
        return True

    def _before_value(self, final: bool) -> bool:
        buf = self._buf
        pos, marker = find_first(buf, _BEFORE_VALUE)
        if pos == -1:
            if final:
                return self._finish("")
            self._buf = buf[len(buf) - partial_suffix(buf, _BEFORE_VALUE):]
            return False
        if marker != VALUE:                       # a key without a value
            self._buf = buf[pos:]
            self._state = "body"
            return True
        self._buf = buf[pos + len(VALUE):]
        self._value_begin(self._key)
        self._state = "value"
        return True

    def _value(self, final: bool) -> bool:
        buf = self._buf
        pos, marker = find_first(buf, _VALUE_ENDS)
        if pos == -1 and not final:
            safe = len(buf) - partial_suffix(buf, _VALUE_ENDS)
            self._value_text(buf[:safe])
            self._buf = buf[safe:]
            return False
        if pos == -1:                                # cut short: a partial end marker goes
            raw, rest = buf[:len(buf) - partial_suffix(buf, _VALUE_ENDS)], ""
        else:
            raw = buf[:pos]
            rest = buf[pos + len(VALUE_END):] if marker == VALUE_END else buf[pos:]
        self._value_text(raw)
        self._value_end()
        self._buf = rest
        self._state = "body"
        return True
