"""Hermes tool calls (Qwen2.5, Qwen3, Hermes and many others).

    <tool_call>
    {"name": "NAME", "arguments": {...}}
    </tool_call>

The block is held until the JSON object and `</tool_call>` have arrived; a
call to an offered tool then goes out whole (start, the arguments object as
one delta, end). "parameters" is read as "arguments", arguments written as
JSON text of an object are read too, and missing arguments mean {}. A reply
that ends right after a complete object, without `</tool_call>`, still
calls. Anything else (text that is not one JSON object, an unoffered name,
invalid JSON, a cut-off object) is answer text, opener included; except that
when the request forced a call (`forced`), a call cut off by the token limit
goes out with the arguments text it has, as OpenAI returns one (finish_reason
"length"), once its name is known: whole, or the one offered name its start
fits (the grammar holds a forced call to offered names).
"""

from __future__ import annotations

import re

from .base import MAX_NAME, ToolParser
from .jsonish import early_check
from .scan import BAD, JsonExtent, skip_ws
from .schema import call_from_json, loads
from .types import ToolCallEnd

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_CUT_NAME = re.compile(r'\{\s*(?:"name"\s*:\s*"([^"\\]*)("?))?')
_CUT_CALL = re.compile(r'\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*')


class HermesParser(ToolParser):
    name = "hermes"
    openers = (OPEN,)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._extent: JsonExtent | None = None
        self._start = 0
        self._checked = False

    def _step(self, final: bool) -> bool:
        if self._state == "content":
            return self._scan_content(final)
        return self._block(final)

    def _block(self, final: bool) -> bool:
        buf = self._buf
        if self._extent is None:
            j = skip_ws(buf, len(OPEN))
            if j - len(OPEN) > MAX_NAME:
                return self._reject(len(OPEN))
            if j == len(buf):
                return self._reject(len(OPEN)) if final else False
            if buf[j] != "{":
                return self._reject(len(OPEN))
            self._start = j
            self._extent = JsonExtent(j)
            self._checked = False
        end = self._extent.scan(buf)
        if end == BAD:
            return self._drop_block()
        if not self._checked:
            verdict = early_check(buf[self._start:], self.tools)
            if verdict:
                return self._drop_block()
            self._checked = verdict is False
        if end is None:
            if final and self.forced:
                return self._cut_call()
            return self._drop_block() if final else False
        k = skip_ws(buf, end)
        tail = buf[k:k + len(CLOSE)]
        if tail == CLOSE:
            consumed = k + len(CLOSE)
        elif not final and CLOSE.startswith(tail):
            return False
        elif final and not tail:
            consumed = len(buf)
        else:
            return self._drop_block()
        try:
            call = call_from_json(loads(buf[self._start:end]), self.tools, need_arguments=False)
        except ValueError:
            call = None
        if call is None:
            return self._drop_block()
        self._extent = None
        self._buf = buf[consumed:]
        self._state = "content"
        self._whole_call(*call)
        return True

    def _cut_call(self) -> bool:
        """A forced call cut off inside its JSON: the call, with the arguments text so far,
        when its name is known (whole, or the one offered name its start fits); else
        nothing (the markup so far is the forced opening, not answer text)."""
        m = _CUT_CALL.match(self._buf, self._start)
        if m is not None:
            try:
                name = loads(m.group(1))
            except ValueError:
                name = None
            if name not in self.tools:
                return self._drop_block()
            args = self._buf[m.end():]
        else:
            start = _CUT_NAME.match(self._buf, self._start)
            begun = (start.group(1) or "") if start else ""
            whole = bool(start and start.group(2))
            names = [n for n in self.tools if (n == begun if whole else n.startswith(begun))]
            name, args = (names[0], "") if len(names) == 1 else (None, "")
        if name is not None:
            self._start_call(name)
            self._args_text(args)
            self._out.append(ToolCallEnd(self._index))
            self._index = -1
        self._extent = None
        self._buf = ""
        self._state = "content"
        return True

    def _drop_block(self) -> bool:
        self._extent = None
        return self._reject(len(OPEN))
