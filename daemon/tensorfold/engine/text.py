"""Per-request reply text: incremental detokenization plus stop-string holdback.

The engine thread owns one `ReplyText` per running request and pushes every
accepted token into it.  Each push returns the text that is now safe to send:

1. `IncrementalDecoder` turns token ids into text.  Byte-level BPE vocabularies
   split one character's UTF-8 bytes over several tokens, so a token can end in
   the middle of a character; that partial character is held until the bytes
   that complete it arrive (text before it in the same token is released).
   The decoder keeps a small window of token ids (the last released tokens as
   context, then the newer ones) and decodes only that window, so a step costs
   O(window), not O(reply).  Everything it releases, concatenated, equals
   ``tokenizer.decode(all_ids, skip_special_tokens=...)``.

2. `StopMatcher` scans the released characters for stop strings with an
   Aho-Corasick automaton.  Its state after each character is the longest
   suffix of the text that is still the beginning of some stop string: that
   suffix is held back (never more than ``max(len(stop)) - 1`` characters), so
   a stop string never leaks, however many tokens or streamed chunks it spans.

When a stop string completes, the reply ends: the text up to the earliest
start of a match is released and nothing after it ever is.  Among matches that
complete on the same token the one starting earliest wins (ties go to the one
that ends first); a stop string that would complete only on a later token never
gets the chance, because the reply has already ended.

No torch, no Quart, no pydantic: plain Python on the engine thread.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "IncrementalDecoder",
    "ReplyText",
    "StepResult",
    "StopMatcher",
]

REPLACEMENT_CHAR = "\ufffd"


class TokenizerLike(Protocol):
    """The part of a Hugging Face tokenizer that reply text needs."""

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass(slots=True, frozen=True)
class StepResult:
    """What one pushed token released.

    `text` is the newly releasable reply text (possibly empty); `stopped` is
    True once a stop string has ended the reply, and `stop_string` names it.
    """

    text: str = ""
    stopped: bool = False
    stop_string: str | None = None


_NOTHING = StepResult()


# ---------------------------------------------------------------------------
# Incremental detokenization
# ---------------------------------------------------------------------------

_SKIPPED_IDS: weakref.WeakKeyDictionary[Any, frozenset[int]] = weakref.WeakKeyDictionary()


def _skipped_special_ids(tokenizer: Any) -> frozenset[int]:
    """Ids that ``decode(..., skip_special_tokens=True)`` drops.

    Only the tokenizer backend's own notion counts (added tokens flagged
    special), so dropping these ids before decoding never changes the text.
    The set is only an optimisation: ids missing from it still go through
    `decode`, which skips them itself.
    """
    try:
        return _SKIPPED_IDS[tokenizer]
    except (KeyError, TypeError):
        pass
    ids: frozenset[int] = frozenset()
    special = getattr(tokenizer, "special_ids", None)          # tensorfold's Tokenizer
    if isinstance(special, frozenset):
        ids = special
    else:                                                       # a Hugging Face one
        try:
            added = tokenizer.added_tokens_decoder
        except Exception:  # neither: rely on decode alone
            added = None
        if isinstance(added, dict):
            ids = frozenset(int(i) for i, tok in added.items() if getattr(tok, "special", False))
    try:
        _SKIPPED_IDS[tokenizer] = ids
    except TypeError:  # not weak-referenceable
        pass
    return ids


class IncrementalDecoder:
    """Token ids in, complete characters out, equal to one whole `decode`.

    The decoder keeps only a window of token ids: `_ids[:_read]` is context
    (the tokens of the last step whose text ended on a whole character) and
    `_ids[_read:]` the tokens after it.  Each step decodes the window; of that
    text, the first `_emitted` characters are the context's own decoding plus
    whatever was already released, and the rest is new.  A trailing U+FFFD is
    what a character still missing bytes decodes to, so the new text is
    released only up to it; once the window's text ends on a whole character,
    the window slides and the tokens since the last slide become the context.
    Decoding with context rather than the new tokens alone keeps what decoders
    such as SentencePiece's Metaspace need to place leading spaces (the same
    scheme as vLLM's prefix and read offsets).

    Exactness: for byte-level BPE the released text always equals `decode` of
    all ids, invalid UTF-8 included (a trailing invalid sequence is released
    by `flush`).  With tokenizers' ByteFallback decoder (`<0xNN>` tokens), a
    run of byte tokens that is not valid UTF-8 decodes to one U+FFFD per token,
    valid bytes in the run included, which no stream can match once those
    bytes were sent; valid text is exact there too.
    """

    __slots__ = ("_tokenizer", "_skip", "_skipped", "_ids", "_read", "_emitted", "_done")

    def __init__(self, tokenizer: TokenizerLike, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._skipped = _skipped_special_ids(tokenizer) if skip_special_tokens else frozenset()
        self._ids: list[int] = []
        self._read = 0
        self._emitted = 0
        self._done = False

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip)

    def push(self, token_id: int) -> str:
        """Add one token; return the text it makes complete (maybe "")."""
        if self._done:
            raise RuntimeError("IncrementalDecoder.push() after flush()")
        token_id = int(token_id)
        if token_id in self._skipped:
            return ""
        ids = self._ids
        ids.append(token_id)
        text = self._decode(ids)
        emitted = self._emitted
        if text.endswith(REPLACEMENT_CHAR):
            # A character still missing bytes: release only what precedes it.
            end = len(text.rstrip(REPLACEMENT_CHAR))
            if end <= emitted:
                return ""
            self._emitted = end
            return text[emitted:end]
        if len(text) <= emitted:
            return ""  # the token added no text (yet)
        # Slide the window: the tokens since the last slide become the
        # context, and older ones are never decoded again.
        del ids[: self._read]
        self._read = len(ids)
        self._emitted = len(self._decode(ids))
        return text[emitted:]

    def flush(self) -> str:
        """Release whatever is still held, as `decode` renders it (the reply ended)."""
        if self._done:
            return ""
        self._done = True
        text = self._decode(self._ids)
        return text[self._emitted :] if len(text) > self._emitted else ""


# ---------------------------------------------------------------------------
# Stop strings
# ---------------------------------------------------------------------------


class StopMatcher:
    """Aho-Corasick automaton over the stop strings, fed one chunk at a time.

    Positions are global character indices into everything fed so far.
    `hold` is the length of the longest suffix of the fed text that is a
    proper prefix of some stop string: the characters that must stay unsent.
    """

    __slots__ = ("stops", "max_len", "_goto", "_fail", "_depth", "_out", "_pattern", "_state", "_fed")

    def __init__(self, stops: Iterable[str]) -> None:
        patterns: list[str] = []
        for s in stops:
            if s and s not in patterns:  # empty stop strings are ignored
                patterns.append(s)
        self.stops: tuple[str, ...] = tuple(patterns)
        self.max_len = max((len(s) for s in patterns), default=0)

        goto: list[dict[str, int]] = [{}]
        depth = [0]
        pattern = [-1]  # index of the stop string spelled by this node, or -1
        for index, s in enumerate(patterns):
            node = 0
            for ch in s:
                nxt = goto[node].get(ch)
                if nxt is None:
                    nxt = len(goto)
                    goto[node][ch] = nxt
                    goto.append({})
                    depth.append(depth[node] + 1)
                    pattern.append(-1)
                node = nxt
            pattern[node] = index

        n = len(goto)
        fail = [0] * n
        # out[node]: the deepest node on node's suffix chain (itself included)
        # that spells a whole stop string, i.e. the longest match ending here.
        out = [-1] * n
        queue: deque[int] = deque()
        for child in goto[0].values():
            queue.append(child)
            out[child] = child if pattern[child] >= 0 else -1
        while queue:
            node = queue.popleft()
            for ch, child in goto[node].items():
                f = fail[node]
                while f and ch not in goto[f]:
                    f = fail[f]
                fail[child] = goto[f].get(ch, 0)  # shallower than child: never child
                out[child] = child if pattern[child] >= 0 else out[fail[child]]
                queue.append(child)

        self._goto = goto
        self._fail = fail
        self._depth = depth
        self._out = out
        self._pattern = pattern
        self._state = 0
        self._fed = 0

    @property
    def fed(self) -> int:
        """Characters fed so far (up to the cut, once a match was found)."""
        return self._fed

    @property
    def hold(self) -> int:
        """Trailing characters that could still begin a stop string."""
        return self._depth[self._state]

    def feed(self, text: str) -> tuple[int, str] | None:
        """Scan `text`; return (global start, stop string) of the match to cut at.

        That is the earliest-starting match that ends inside `text`; with no
        match, None, and `hold` says how much of the tail to keep back.
        """
        goto, fail, out, depth = self._goto, self._fail, self._out, self._depth
        state = self._state
        pos = self._fed
        best_start = -1
        best_pattern = -1
        max_len = self.max_len
        for ch in text:
            while True:
                nxt = goto[state].get(ch)
                if nxt is not None:
                    state = nxt
                    break
                if state == 0:
                    break
                state = fail[state]
            pos += 1
            hit = out[state]
            if hit >= 0:
                start = pos - depth[hit]
                if best_pattern < 0 or start < best_start:
                    best_start, best_pattern = start, self._pattern[hit]
            # A later match ends later and is at most max_len long: once it
            # cannot start before the best one, stop looking.
            if best_pattern >= 0 and pos + 1 - max_len >= best_start:
                break
        self._state = state
        self._fed = pos
        if best_pattern < 0:
            return None
        return best_start, self.stops[best_pattern]


# ---------------------------------------------------------------------------
# The per-request reply text
# ---------------------------------------------------------------------------


class ReplyText:
    """Incremental reply text for one request: push tokens, send what comes out.

    `push` returns a `StepResult` whose `text` is safe to send: complete
    characters only, and nothing that could still turn out to be part of a
    stop string.  Once a stop string completes, `stopped` is True, the text up
    to (not including) the match is all that was ever released, and further
    pushes release nothing (engines that decode on after a match may keep
    pushing).  When the reply ends another way, `finish()` releases what was
    held back.  Special tokens are skipped when `skip_special_tokens` is True;
    end-of-sequence handling is the engine's business.
    """

    __slots__ = ("_decoder", "_matcher", "_held", "_parts", "_stopped", "_stop_string", "_finished")

    def __init__(
        self,
        tokenizer: TokenizerLike,
        stop: Sequence[str] = (),
        skip_special_tokens: bool = True,
    ) -> None:
        if isinstance(stop, str):
            stop = (stop,)
        self._decoder = IncrementalDecoder(tokenizer, skip_special_tokens)
        matcher = StopMatcher(stop)
        self._matcher: StopMatcher | None = matcher if matcher.stops else None
        self._held = ""
        self._parts: list[str] = []
        self._stopped = False
        self._stop_string: str | None = None
        self._finished = False

    # -- state -------------------------------------------------------------

    @property
    def text(self) -> str:
        """The whole reply text released so far (cut before the stop string)."""
        parts = self._parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def stop_string(self) -> str | None:
        return self._stop_string

    @property
    def held(self) -> str:
        """Decoded text held back because it could begin a stop string."""
        return self._held

    # -- steps ---------------------------------------------------------------

    def push(self, token_id: int) -> StepResult:
        """Add one reply token; return the text it releases."""
        if self._stopped:
            return StepResult("", True, self._stop_string)
        if self._finished:
            raise RuntimeError("ReplyText.push() after finish()")
        new = self._decoder.push(token_id)
        if not new:
            return _NOTHING
        return self._take(new)

    def finish(self) -> str:
        """The reply ended without a stop match: release everything held back.

        Also flushes an incomplete trailing character the way `decode` shows
        it (U+FFFD); should that flushed text complete a stop string, the reply
        is cut there and `stopped` turns True.  Idempotent; after a stop it
        returns "".
        """
        if self._stopped or self._finished:
            self._finished = True
            return ""
        self._finished = True
        tail = self._decoder.flush()
        released = ""
        if tail:
            step = self._take(tail)
            released = step.text
            if step.stopped:
                return released
        rest = self._held
        self._held = ""
        if rest:
            self._parts.append(rest)
        return released + rest

    def _take(self, new: str) -> StepResult:
        """Run newly decoded characters through the stop matcher."""
        matcher = self._matcher
        if matcher is None:
            self._parts.append(new)
            return StepResult(new)
        pending = self._held + new
        base = matcher.fed - len(self._held)  # global index of pending[0]
        match = matcher.feed(new)
        if match is not None:
            start, stop = match
            out = pending[: max(0, start - base)]
            self._held = ""
            self._stopped = True
            self._stop_string = stop
            if out:
                self._parts.append(out)
            return StepResult(out, True, stop)
        keep = matcher.hold
        cut = len(pending) - keep
        out = pending[:cut]
        self._held = pending[cut:]
        if out:
            self._parts.append(out)
        return StepResult(out)
