"""Splitting a reply into reasoning and answer.

    <think>
    REASONING
    </think>

    ANSWER

The markers are configurable (`REASONING_MARKERS`): `<think>`/`</think>`
for Qwen, GLM and most others; Gemma 4's thought channel is
`<|channel>thought` ... `<channel|>`.

* The block counts only at the start of the reply (after whitespace). A reply
  that starts with anything else is all answer, kept exactly.
* `starts_inside=True` is for templates whose prompt already opened the block
  (the prompt ends with `<think>`; see `starts_in_reasoning`): the reply is
  reasoning until the close marker. A reply that writes the open marker again
  first is read the same way.
* Reasoning has its surrounding whitespace stripped, and the answer after a
  close marker its leading whitespace (`strip=False` keeps both).
* A reply that ends inside the block is all reasoning, except (SPEC) when a
  tool call was written in it: the reasoning stops where the first call
  opener (`call_openers`, from the tool parser) starts and the text from the
  opener on is answer text, for the tool parser to read. Because that can only
  be known at the end, reasoning text from a call opener on is held back; if
  the block closes after it, the held text was reasoning (a call only
  mentioned while thinking) and goes out as reasoning then. So streamed
  reasoning never carries a call's markup.
"""

from __future__ import annotations

from collections.abc import Sequence

from .scan import WS, EdgeTrim, StepMachine, find_first, partial_suffix
from .types import ContentDelta, Event, ReasoningDelta, coalesce

REASONING_MARKERS: dict[str, tuple[str, str]] = {
    "think": ("<think>", "</think>"),
    "gemma4": ("<|channel>thought", "<channel|>"),
}


def starts_in_reasoning(prompt: str, open_marker: str = "<think>") -> bool:
    """Whether a rendered prompt leaves the reply inside the think block."""
    return prompt.rstrip(WS).endswith(open_marker)


class _Keep:
    """EdgeTrim's interface without trimming (strip=False)."""

    def push(self, s: str) -> str:
        return s

    def drop(self) -> None:
        pass


class ReasoningParser(StepMachine):
    def __init__(self, open_marker: str = "<think>", close_marker: str = "</think>", *,
                 starts_inside: bool = False, call_openers: Sequence[str] = (), strip: bool = True) -> None:
        self.open_marker = open_marker
        self.close_marker = close_marker
        self.starts_inside = starts_inside
        self.call_openers = tuple(call_openers)
        self.strip = strip
        self._markers = (close_marker,) + self.call_openers
        self._buf = ""
        self._state = "before"
        self._trim = EdgeTrim() if strip else _Keep()
        self._lstrip = False          # the answer's leading whitespace still to drop
        self._scan = 0                # where the close search resumes in held text
        self._out: list[Event] = []

    @classmethod
    def named(cls, name: str, **kwargs) -> ReasoningParser:
        """A parser for one of REASONING_MARKERS."""
        open_marker, close_marker = REASONING_MARKERS[name]
        return cls(open_marker, close_marker, **kwargs)

    def end(self) -> list[Event]:
        self._drain()
        self._buf = ""
        return self._take()

    def parse(self, text: str) -> tuple[str, str]:
        """(reasoning, content) of a whole reply, on a fresh parser."""
        fresh = ReasoningParser(self.open_marker, self.close_marker, starts_inside=self.starts_inside,
                                call_openers=self.call_openers, strip=self.strip)
        events = fresh.feed(text) + fresh.end()
        return ("".join(e.text for e in events if isinstance(e, ReasoningDelta)),
                "".join(e.text for e in events if isinstance(e, ContentDelta)))

    def _take(self) -> list[Event]:
        out = coalesce(self._out)
        self._out.clear()
        return out

    def _reasoning(self, s: str) -> None:
        s = self._trim.push(s)
        if s:
            self._out.append(ReasoningDelta(s))

    def _content(self, s: str) -> None:
        if s:
            self._out.append(ContentDelta(s))

    def _step(self, final: bool) -> bool:
        state = self._state
        if state == "before":
            return self._before(final)
        if state == "inside":
            return self._inside(final)
        if state == "held":
            return self._held(final)
        return self._after()

    def _before(self, final: bool) -> bool:
        buf = self._buf
        s = buf.lstrip(WS)
        if s.startswith(self.open_marker):
            self._buf = s[len(self.open_marker):]
            self._state = "inside"
            return True
        if not final and self.open_marker.startswith(s):
            return False
        self._state = "inside" if self.starts_inside else "after"
        return True

    def _inside(self, final: bool) -> bool:
        buf = self._buf
        pos, marker = find_first(buf, self._markers)
        if pos == -1:
            cut = len(buf) if final else len(buf) - partial_suffix(buf, self._markers)
            self._reasoning(buf[:cut])
            self._buf = buf[cut:]
            if final:
                self._trim.drop()
            return False
        self._reasoning(buf[:pos])
        if marker == self.close_marker:
            self._close(pos + len(marker))
        else:
            self._buf = buf[pos:]
            self._scan = len(marker)
            self._state = "held"
        return True

    def _close(self, after: int) -> None:
        self._trim.drop()
        self._buf = self._buf[after:]
        self._lstrip = self.strip
        self._state = "after"

    def _held(self, final: bool) -> bool:
        buf = self._buf
        p = buf.find(self.close_marker, self._scan)
        if p != -1:
            self._reasoning(buf[:p])
            self._close(p + len(self.close_marker))
            return True
        if not final:
            self._scan = max(self._scan, len(buf) - len(self.close_marker) + 1)
            return False
        self._trim.drop()              # the reply ended in the block: the call is the answer
        self._state = "after"
        return True

    def _after(self) -> bool:
        buf = self._buf
        if self._lstrip:
            buf = buf.lstrip(WS)
            if not buf:
                self._buf = ""
                return False
            self._lstrip = False
        self._content(buf)
        self._buf = ""
        return False
