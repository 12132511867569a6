"""Per-row token rules: each a function of the reply tokens before its row.

Because a rule looks only at the tokens before the position it applies to,
drafted, serial and concurrent decoding apply the same rule to the same row:
the engine cuts drafts a rule rejects before the verify forward, then masks
each remaining row's logits with the rule for that row's path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from .types import Think, find_marker


class Constraint(Protocol):
    def allows(self, reply: Sequence[int], token: int) -> bool:
        """May `token` come at reply position len(reply), after `reply`?"""
        ...

    def mask(self, reply: Sequence[int], logits: np.ndarray) -> None:
        """Restrict fp32 logits [vocab] for position len(reply) in place (-inf = forbidden)."""
        ...


# A rule whose class sets FORBIDS_ONLY = True only ever sets logits to -inf (its mask on a
# row equals forbidding a set of tokens, whatever the values), so ranks that each hold part
# of the vocabulary can apply it to their own columns (for_shards()).


@dataclass(frozen=True, slots=True)
class ForceToken:
    """Force `token` at reply position `position` (a test rule and the simplest one)."""

    FORBIDS_ONLY: ClassVar[bool] = True

    position: int
    token: int

    def allows(self, reply: Sequence[int], token: int) -> bool:
        return len(reply) != self.position or token == self.token

    def mask(self, reply: Sequence[int], logits: np.ndarray) -> None:
        if len(reply) == self.position:
            keep = logits[self.token].copy()
            logits.fill(-np.inf)
            logits[self.token] = keep


@dataclass(frozen=True, slots=True)
class LogitAdjust:
    """OpenAI's logit_bias, frequency_penalty and presence_penalty, and vLLM's
    repetition_penalty, as a rule of the tokens before the row.

    In fp32, in this order: logits[t] += bias[t]; for each token t in the reply
    so far with count c, logits[t] -= frequency * c + presence; for each token
    in the prompt or the reply, a positive logit is divided by `repetition` and
    a negative one multiplied by it.  Every draw (serial, drafted, batched) at
    a reply position sees the same reply before it, so the same logits.
    """

    bias: tuple[tuple[int, float], ...] = ()
    frequency: float = 0.0
    presence: float = 0.0
    repetition: float = 1.0
    # the prompt's distinct token ids (for repetition), made once per request, not per row
    prompt_seen: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64), compare=False)

    def allows(self, reply: Sequence[int], token: int) -> bool:
        return True

    def mask(self, reply: Sequence[int], logits: np.ndarray) -> None:
        self.edits(reply).apply(logits)

    def edits(self, reply: Sequence[int]) -> Edits:
        """This rule's changes at position len(reply), as values."""
        none, f32 = np.empty(0, dtype=np.int64), np.float32
        add, add_values = none, np.empty(0, dtype=f32)
        if self.bias:
            add = np.array([t for t, _ in self.bias], dtype=np.int64)
            add_values = np.array([b for _, b in self.bias], dtype=f32)
        sub, sub_values, seen = none, np.empty(0, dtype=f32), none
        counted = reply and (self.frequency or self.presence)
        written = np.array(list(reply), dtype=np.int64)
        if counted:
            sub, counts = np.unique(written, return_counts=True)
            sub_values = counts.astype(f32) * np.float32(self.frequency) + np.float32(self.presence)
        if self.repetition != 1.0:
            seen = np.unique(np.concatenate([self.prompt_seen, written]))
        return Edits(add, add_values, sub, sub_values, seen, self.repetition)


@dataclass(frozen=True)
class Edits:
    """LogitAdjust's changes at one row: logits[add] += add_values, logits[sub] -= sub_values,
    then each `seen` logit divided by `repetition` when positive, else multiplied by it.  Each
    is one fp32 operation per token, so a rank holding part of the vocabulary (`offset` on)
    makes them on its own columns with the bits the whole row gets."""

    add: np.ndarray           # int64 ids (distinct)
    add_values: np.ndarray    # fp32
    sub: np.ndarray           # int64 ids (distinct)
    sub_values: np.ndarray    # fp32
    seen: np.ndarray          # int64 ids (distinct)
    repetition: float

    def apply(self, logits: np.ndarray, offset: int | None = None) -> None:
        """On a whole fp32 row; or, with `offset`, on the columns offset.. of a row a rank
        holds part of."""
        n = logits.shape[-1]

        def here(ids: np.ndarray, *values: np.ndarray) -> list[np.ndarray]:
            if offset is not None:
                keep = (ids >= offset) & (ids < offset + n)
                ids, values = ids[keep] - offset, tuple(v[keep] for v in values)
            return [ids, *values]
        if self.add.size:
            ids, values = here(self.add, self.add_values)
            logits[ids] += values
        if self.sub.size:
            ids, values = here(self.sub, self.sub_values)
            logits[ids] -= values
        if self.repetition != 1.0:
            (ids,) = here(self.seen)
            v, r = logits[ids], np.float32(self.repetition)
            logits[ids] = np.where(v > 0, v / r, v * r)


def cut_drafts(constraints: Sequence[Constraint], reply: Sequence[int], drafts: list[int]) -> list[int]:
    """The longest prefix of `drafts` every rule allows after `reply`: the shortest of each
    rule's own (a rule's answer depends on the path alone), each rule asked about what the
    ones before it allowed."""
    n = len(drafts)
    for c in constraints:
        if n == 0:
            break
        n = allowed_run(c, reply, drafts[:n])
    return drafts[:n]


def allowed_run(rule: Constraint, reply: Sequence[int], drafts: Sequence[int]) -> int:
    """How many of `drafts`, in order after `reply`, `rule` allows: its own `allowed_run`
    where it has one (the grammar host answers it in one exchange), else one `allows` a token."""
    run = getattr(rule, "allowed_run", None)
    if run is not None:
        return run(reply, drafts)
    path = list(reply)
    for i, d in enumerate(drafts):
        if not rule.allows(path, d):
            return i
        path.append(d)
    return len(drafts)


def ask_ahead(rows: Iterable[tuple[Sequence[Constraint], Sequence[int]]]) -> None:
    """Rules that answer from another process (the grammar host's, grammar/remote.py) start
    on the masks of these rows (each row's rules and reply) while the forward runs; their
    `mask` then takes the answer. A mask depends on its reply alone, so the masks are the
    same whether asked ahead or not."""
    for rules, reply in rows:
        for c in rules:
            ahead = getattr(c, "ask_ahead", None)
            if ahead is not None:
                ahead(reply)


def apply(constraints: Sequence[Constraint], reply: Sequence[int], logits: np.ndarray) -> None:
    for c in constraints:
        c.mask(reply, logits)


def for_shards(constraints: Sequence[Constraint], reply: Sequence[int],
               vocab: int) -> tuple[list[Edits], np.ndarray] | None:
    """The rules at position len(reply) as ranks holding parts of the vocabulary apply them to
    their own columns: LogitAdjust's edits, in order, and the bool [vocab] of tokens the other
    rules forbid (FORBIDS_ONLY); None when a rule is neither.  The two commute: a forbidden
    logit is -inf after finite additions and positive scalings too."""
    edits, forbids = [], []
    for c in constraints:
        if isinstance(c, LogitAdjust):
            edits.append(c.edits(reply))
        elif getattr(c, "FORBIDS_ONLY", False):
            forbids.append(c)
        else:
            return None
    row = np.zeros(vocab, dtype=np.float32)
    apply(forbids, reply, row)
    return edits, np.isneginf(row)


@dataclass(frozen=True, slots=True)
class ThinkingBudget:
    """Close a think block that is still open at its budget-th token.

    From reply position budget-1 on, the rule forces `close` (the tokens of a
    newline, the closing marker and a blank line) one token a position, unless
    the reply closed the block (`marker`) before that position. The cut depends
    on the token count only, so serial and drafted decoding cut alike.
    """

    FORBIDS_ONLY: ClassVar[bool] = True

    budget: int
    close: tuple[int, ...]          # "\n</think>\n\n" as tokens
    marker: tuple[int, ...]         # "</think>" as tokens
    opener: tuple[int, ...] = ()    # "<think>" as tokens: the reply must open the block...
    inside: bool = False            # ...unless the prompt already did

    def _forced(self, reply: Sequence[int]) -> int | None:
        start = self.budget - 1
        i = len(reply) - start
        if i < 0 or i >= len(self.close):
            return None
        before = reply[:start]
        thinking = self.inside or find_marker(before, self.opener) >= 0
        return self.close[i] if thinking and find_marker(before, self.marker) < 0 else None

    def allows(self, reply: Sequence[int], token: int) -> bool:
        forced = self._forced(reply)
        return forced is None or token == forced

    def mask(self, reply: Sequence[int], logits: np.ndarray) -> None:
        forced = self._forced(reply)
        if forced is not None:
            ForceToken(len(reply), forced).mask(reply, logits)

    def stop_at_marker(self) -> "ThinkingBudget":
        """The same cut ending at the closing marker (a grammar takes over after it)."""
        at = find_marker(self.close, self.marker)
        end = len(self.close) if at < 0 else at + len(self.marker)
        return ThinkingBudget(self.budget, self.close[:end], self.marker, self.opener, self.inside)


def replace(constraints: Sequence[Constraint], reply: Sequence[int], token: int) -> int:
    """The token after every replacing rule (a rule that fixes the draw, not the distribution)."""
    for c in constraints:
        fix = getattr(c, "replace", None)
        if fix is not None:
            token = fix(reply, token)
    return token


@dataclass(frozen=True, slots=True)
class ToolForce:
    """tool_choice "required" or a named function: the answer opens a call to an offered tool.

    The first answer token that is not whitespace is replaced by the call
    opener and the template's text before a tool name (`prefix`, forced one
    token a position); then the name is held to the offered ones: a token that
    leaves them is replaced by the next token of the rest of the first offered
    name its written part starts (and the text that ends a name). After the
    name the model writes the arguments. While the reply is thinking, the
    answer starts after the think end; a reply may open its think block with
    its first token (a one-token opener). Every fix depends only on the tokens
    before it.
    """

    FORBIDS_ONLY: ClassVar[bool] = True

    prefix: tuple[int, ...]
    names: tuple[str, ...]
    name_end: str
    text: Any                          # token ids -> text (the tokenizer's decode)
    encode: Any                        # text -> token ids
    think: Think | None = None         # the request's think markers; None when it does not think

    def _answer(self, reply: Sequence[int]) -> int | None:
        """Where the answer starts: after the think end while the reply thinks, else at once."""
        t = self.think
        if t is None or not (t.inside or find_marker(reply, t.opener) == 0):
            return 0
        at = find_marker(reply, t.close)
        return None if at < 0 else at + len(t.close)

    def replace(self, reply: Sequence[int], token: int) -> int:
        if not reply and self.think is not None and token == self.think.reply_opener:
            return token                                  # the reply opens its think block first
        start = self._answer(reply)
        if start is None:
            return token                                  # still thinking
        answer = list(reply[start:])
        blank = 0
        while blank < len(answer) and not self.text([answer[blank]]).strip():
            blank += 1
        if blank == len(answer):                          # nothing but whitespace so far
            return token if not self.text([token]).strip() else self.prefix[0]
        done = len(answer) - blank
        if done < len(self.prefix):
            return self.prefix[done]
        written = self.text(answer[blank + len(self.prefix):])
        if any(written.startswith(n + self.name_end) for n in self.names):
            return token                                  # the name is written: arguments are free
        new = written + self.text([token])
        if any((n + self.name_end).startswith(new) or new.startswith(n + self.name_end) for n in self.names):
            return token
        name = next((n for n in self.names if n.startswith(written)), self.names[0])
        rest = (name + self.name_end)[len(written):] if name.startswith(written) else name + self.name_end
        return self.encode(rest)[0]

    def allows(self, reply: Sequence[int], token: int) -> bool:
        return self.replace(reply, token) == token

    def mask(self, reply: Sequence[int], logits: np.ndarray) -> None:
        pass                                              # it fixes draws, not distributions
