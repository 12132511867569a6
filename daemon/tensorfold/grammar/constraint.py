"""A compiled grammar as the engine's per-row Constraint (engine/constraints.py).

The engine asks about rows along one path: `allows(reply, d1)`,
`allows(reply + [d1], d2)`... to cut drafts, then `mask(reply)`,
`mask(reply + [t0])`... for the verify rows, and the next round starts from
the accepted prefix (or, after a preemption, from an empty reply). The adapter
keeps one xgrammar GrammarMatcher synced to the last path it was asked about:
each call compares the requested reply with the tokens the matcher has
consumed, rolls back the difference (`GrammarMatcher.rollback`; xgrammar 0.2
keeps unlimited history, older ones get a window, and a failed rollback falls
back to reset and replay) and then accepts the new tokens. `allows` leaves the
token it accepted consumed, so the next row along the path costs nothing. The
matcher's state therefore depends only on the reply tokens: drafted, serial
and concurrent decoding see the same masks.

Rules:
- `start_after` (a token sequence, e.g. the `</think>` marker's tokens): the
  grammar applies only to the tokens after the first occurrence of the marker
  in the reply; before that every token is allowed and logits are untouched.
- `may_open` (with `start_after`; a one-token think opener such as `<think>`):
  the reply may open its think block itself. The grammar holds from the first
  reply token, but there the opener is allowed too; a reply that starts with
  it thinks freely and the grammar starts after the marker.
- The end tokens (the compiler's stop tokens) are allowed only once the value
  is complete (xgrammar's rule).
- After the grammar has taken an end token (the value is finished), only end
  tokens are allowed: a reply that goes on (ignore_eos) can only repeat the end
  token; any other token there is a grammar failure.
- Ids past the tokenizer (vocabulary padding) and special tokens other than the
  end tokens are never allowed.
- A reply that contains a token the grammar rejects (or a state in which no
  token can follow) raises GrammarError from `mask`, `allows` or `check`: the
  engine ends that reply with an error (HTTP 500); other requests go on.

Not thread-safe: one request's constraint lives on the engine thread.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import GrammarError, load_xgrammar

ROLLBACK_WINDOW = 256         # for xgrammar versions that bound rollback (0.2 is unlimited)


class GrammarConstraint:
    """One request's grammar, applied to reply positions (the engine's Constraint protocol)."""

    FORBIDS_ONLY = True           # its mask only forbids tokens (engine/constraints.py)

    def __init__(self, compiled: Any, start_after: Sequence[int] = (), may_open: int | None = None) -> None:
        xg = load_xgrammar()
        kwargs: dict[str, Any] = {}
        param = inspect.signature(xg.GrammarMatcher.__init__).parameters.get("max_rollback_tokens")
        if param is not None and param.default != -1:    # bounded by default: ask for a generous window
            kwargs["max_rollback_tokens"] = ROLLBACK_WINDOW
        self._m = xg.GrammarMatcher(compiled, **kwargs)
        self.vocab_size: int = int(compiled.tokenizer_info.vocab_size)
        self.stop_token_ids: tuple[int, ...] = tuple(self._m.stop_token_ids)
        self._stops = frozenset(self.stop_token_ids)
        # special tokens other than the end tokens never fit a grammar; xgrammar warns on each
        # one it is asked to accept, so they are refused here without asking it
        self._special = frozenset(compiled.tokenizer_info.special_token_ids) - self._stops
        self._marker: list[int] = [int(t) for t in start_after]
        self._opener = None if may_open is None or not self._marker else int(may_open)
        self._bitmask = xg.allocate_token_bitmask(1, self.vocab_size)          # [1, ceil(V/32)] int32
        # the synced path: _reply[:_start] is before the grammar (None: marker not seen yet);
        # _reply[_start:_start + _fed] were accepted by the matcher (one step each), then
        # _tail end tokens after the grammar terminated (not fed).
        self._reply: list[int] = []
        self._start: int | None = self._initial_start()
        self._fed = 0
        self._tail = 0

    def _initial_start(self) -> int | None:
        """Where the grammar starts on an empty reply: at once, or after the marker."""
        return 0 if not self._marker or self._opener is not None else None

    def _may_open_here(self) -> bool:
        return self._opener is not None and not self._reply

    # -- the Constraint protocol ---------------------------------------------------------
    def allows(self, reply: Sequence[int], token: int) -> bool:
        """May `token` come after `reply`? (GrammarError if `reply` itself left the grammar.)"""
        self._sync(reply)
        return self._push(int(token))

    def mask(self, reply: Sequence[int], logits: np.ndarray, offset: int = 0) -> None:
        """Set the logits of tokens the grammar forbids after `reply` to -inf, in place.

        `logits` [n] holds vocabulary columns offset .. offset + n - 1 (a whole row
        by default; a slice when the vocabulary is split across devices).
        Columns past the tokenizer's vocabulary are always forbidden.
        """
        allowed = self.mask_allowed(reply)
        if allowed is not None:
            forbid_others(logits, allowed, offset)

    def mask_allowed(self, reply: Sequence[int]) -> np.ndarray | None:
        """The bool [vocab_size] of the tokens `mask` keeps after `reply`; None before the
        grammar starts (mask leaves the logits alone). GrammarError when none is allowed."""
        self._sync(reply)
        if self._start is None:
            return None
        allowed = self._allowed()                                            # [V] bool, CPU
        if not bool(allowed.any()):
            raise GrammarError(f"the grammar allows no token after reply position {len(self._reply)}")
        return allowed

    # -- more questions about a reply ----------------------------------------------------
    def check(self, reply: Sequence[int]) -> None:
        """Sync to `reply` (e.g. the committed reply); GrammarError if a token left the grammar."""
        self._sync(reply)

    def started(self, reply: Sequence[int]) -> bool:
        """Whether the grammar applies after `reply` (its start_after marker has been seen)."""
        self._sync(reply)
        return self._start is not None

    def is_complete(self, reply: Sequence[int]) -> bool:
        """Whether `reply`'s grammar part is a complete value (an end token may follow, or did)."""
        self._sync(reply)
        return self._start is not None and (self._m.is_terminated() or self._m.is_completed())

    def allowed_tokens(self, reply: Sequence[int]) -> np.ndarray:
        """The bool [vocab_size] vector of tokens allowed after `reply` (all True before the marker)."""
        self._sync(reply)
        if self._start is None:
            return np.ones(self.vocab_size, dtype=bool)
        return self._allowed()

    # -- internals -----------------------------------------------------------------------
    def _allowed(self) -> np.ndarray:
        """A new bool [vocab_size] of the tokens allowed next: the matcher's, and the think
        opener where the reply may open its block with it (`may_open`)."""
        if self._m.is_terminated():
            allowed = np.zeros(self.vocab_size, dtype=bool)
            allowed[list(self._stops)] = True
        else:
            self._m.fill_next_token_bitmask(self._bitmask)
            words = self._bitmask[0].numpy().astype("<i4")                    # [W]: token 32w + j is bit j
            allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[: self.vocab_size].astype(bool)
        if self._may_open_here():
            allowed[self._opener] = True
        return allowed

    def _sync(self, reply: Sequence[int]) -> None:
        """Make the matcher's path equal `reply`: roll back what differs, accept the rest."""
        if not isinstance(reply, list):
            reply = list(reply)
        mine = self._reply
        n = len(mine)
        if len(reply) >= n and reply[:n] == mine:
            k = n
        elif len(reply) < n and mine[: len(reply)] == reply:
            k = len(reply)
        else:
            k = 0
            for a, b in zip(mine, reply):
                if a != b:
                    break
                k += 1
        self._truncate(k)
        for i in range(k, len(reply)):
            token = int(reply[i])
            if not self._push(token):
                raise GrammarError(f"reply token {i} (id {token}) does not fit the grammar")

    def _truncate(self, k: int) -> None:
        """Forget the synced path past its first `k` tokens."""
        if k >= len(self._reply):
            return
        if self._start is not None and self._marker and k < self._start:
            # the cut goes into the think block: the grammar has not started on the shorter path
            if self._fed:
                self._m.reset()
            self._start, self._fed, self._tail = None, 0, 0
        elif self._start is not None:
            keep = k - self._start                                 # grammar tokens kept
            if keep < self._fed:
                self._tail = 0
                self._rollback(self._fed - keep)
                self._fed = keep
            else:
                self._tail = keep - self._fed
        del self._reply[k:]
        if not self._reply and self._start is None:
            self._start = self._initial_start()       # back before a think opener the reply wrote

    def _rollback(self, steps: int) -> None:
        if steps <= 0:
            return
        if steps == self._fed:
            self._m.reset()
            return
        try:
            self._m.rollback(steps)
        except Exception:           # beyond a bounded rollback window: rebuild from the tokens
            self._m.reset()
            start = self._start or 0
            for t in self._reply[start:start + self._fed - steps]:
                if not self._m.accept_token(t):
                    raise GrammarError("grammar state could not be rebuilt") from None

    def _push(self, token: int) -> bool:
        """Extend the synced path by `token` if the grammar takes it (state unchanged if not)."""
        if self._may_open_here() and token == self._opener:
            self._start = None                        # the reply thinks first
            self._reply.append(token)
            return True
        if self._start is None:
            self._reply.append(token)
            m = len(self._marker)
            if len(self._reply) >= m and self._reply[-m:] == self._marker:
                self._start = len(self._reply)
            return True
        if token in self._special or not 0 <= token < self.vocab_size:
            return False
        if self._m.is_terminated():
            if token not in self._stops:
                return False
            self._tail += 1
        elif self._m.accept_token(token):
            self._fed += 1
        else:
            return False
        self._reply.append(token)
        return True


def forbid_others(logits: np.ndarray, allowed: np.ndarray, offset: int = 0) -> None:
    """Set to -inf the logits of columns offset .. offset + n - 1 that the bool `allowed`
    (one per vocabulary id) does not allow; columns past it are forbidden."""
    n = logits.shape[-1]
    keep = np.zeros(n, dtype=bool)
    hi = min(offset + n, len(allowed))
    if hi > offset:
        keep[: hi - offset] = allowed[offset:hi]
    logits[~keep] = -np.inf


def start_rule(think: Any) -> tuple[tuple[int, ...], int | None]:
    """GrammarConstraint's `start_after` and `may_open` for a request that thinks (`think`,
    engine.types.Think; None when it does not): the grammar starts after the think end,
    whether the prompt opened the block or the reply opens it (a one-token opener) with
    its first token; at once otherwise."""
    if think is None or not (think.inside or think.reply_opener is not None):
        return (), None
    return tuple(think.close), think.reply_opener
