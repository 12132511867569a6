"""A smaller model with the same tokenizer guesses the next tokens.

The draft model keeps its own paged KV per sequence. Each proposal first feeds
the positions it has not seen (or saw with a guess that was not kept), then
decodes k tokens with the request's own keyed rule (engine/sampler.py): the
same seed and the same uniform for each reply position. Where the two models'
distributions are close, the shared uniform makes the draft the very token the
target will draw, at any temperature. The guesses only decide how many
positions a round settles: the target model's draw decides every token.

A hybrid draft model (Qwen3.5) also keeps its recurrent state per sequence
(engine/states.py): the sequence's tokens before its last one update one slot
in place (they never change), while its last token and each guess leave their
state in slots of their own, so the next proposal goes on from the state after
the last position still valid.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...backends import thread_mode
from ..cache import BlockCache, give_back_unused
from ..sampler import sample
from ..states import FRESH, SCRATCH_PER_LANE, StatePool, state_bytes
from ..types import SamplingParams

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _State:
    blocks: list[int] = field(default_factory=list)
    fed: list[int] = field(default_factory=list)   # the tokens whose KV the draft model holds
    prompt_len: int = 0
    sampling: SamplingParams = field(default_factory=SamplingParams)
    base: int = -1                     # a hybrid's slot: the state after fed[:settled]
    settled: int = 0
    tail: list[int] = field(default_factory=list)  # the state after each fed position past settled
    last: int = 0                      # the position of the sequence's last token (this proposal)


class DraftModelDrafter:
    name = "model"

    def __init__(self, backend: Any, num_blocks: int, block_size: int, prefill_chunk: int = 256,
                 lanes: int = 8) -> None:
        self.backend = backend
        self.cache = BlockCache(num_blocks, block_size)
        backend.allocate_kv(num_blocks, block_size)
        self.prefill_chunk = prefill_chunk
        self._seqs: dict[str, _State] = {}
        self.states: StatePool | None = None
        if state_bytes(backend):
            self.states = StatePool(lanes * (2 + SCRATCH_PER_LANE))
            backend.allocate_state(self.states.slots)

    def start(self, seq_id: str, tokens: Sequence[int], sampling: SamplingParams) -> None:
        self.finish(seq_id)
        self._seqs[seq_id] = _State(prompt_len=len(tokens), sampling=sampling)

    def finish(self, seq_id: str) -> None:
        state = self._seqs.pop(seq_id, None)
        if state is not None and state.blocks:
            self.cache.release(state.blocks)
        if state is not None and self.states is not None:
            self.states.give([state.base, *state.tail])

    def idle(self) -> None:
        give_back_unused(self.backend, self.cache, self.states)

    def accepted(self, seq_id: str, tokens: Sequence[int]) -> None:
        pass                       # reconciled lazily on the next proposal

    def propose(self, seq_id: str, tokens: Sequence[int], k: int) -> list[int]:
        state = self._seqs.get(seq_id)
        if state is None or k <= 0 or not self._reserve(state, len(tokens) + k):
            return []
        keep = 0                    # positions whose fed token is still the sequence's token
        for a, b in zip(state.fed, tokens):
            if a != b:
                break
            keep += 1
        keep = min(keep, len(tokens) - 1)          # the last token is always fed: its logits are needed
        if self.states is not None:
            if not self._settle(state, keep, k):
                return []
            keep, state.last = len(state.fed), len(tokens) - 1
        del state.fed[keep:]
        with thread_mode(self.backend):
            logits = None
            while len(state.fed) < len(tokens):
                start = len(state.fed)
                chunk = list(tokens[start:start + self.prefill_chunk])
                logits = self._forward(state, chunk, start)
            drafts: list[int] = []
            for _ in range(k):
                token = sample(logits, state.sampling, len(tokens) + len(drafts) - state.prompt_len)
                drafts.append(token)
                if len(drafts) == k:
                    break
                logits = self._forward(state, [token], len(state.fed))
        return drafts

    def _forward(self, state: _State, chunk: list[int], start: int) -> Any:
        if self.states is None:
            seg = self.backend.segment(state.blocks, start, len(chunk))
        else:
            seg = self.backend.segment(state.blocks, start, len(chunk), *self._slots(state, chunk, start))
        logits = self.backend.forward(chunk, [seg], [len(chunk) - 1])[0]
        state.fed.extend(chunk)
        return logits

    # -- a hybrid draft model's state ------------------------------------------------------
    def _settle(self, state: _State, keep: int, k: int) -> bool:
        """Make the state after fed[:keep] the settled one (fed is then cut to keep), and
        check that slots are free for this proposal's last token and guesses."""
        pool = self.states
        if state.base == FRESH:
            taken = pool.take(1)
            if not taken:
                return False
            state.base = taken[0]
        if keep < state.settled:                 # the settled positions never change: start over
            keep = 0
        if keep > state.settled:                 # the state after fed[keep - 1] becomes the settled one
            new = state.tail[keep - 1 - state.settled]
            pool.give([state.base, *(s for s in state.tail if s != new)])
            state.base, state.tail = new, []
        else:
            pool.give(state.tail)
            state.tail = []
        state.settled = keep
        del state.fed[keep:]
        return pool.available >= 1 + k

    def _slots(self, state: _State, chunk: list[int], start: int) -> tuple[int, list[int]]:
        """A chunk's source slot and each row's: the rows before the sequence's last token in
        place in the settled slot; the last token and each guess in one of their own."""
        src = FRESH if start == 0 else (state.tail[-1] if state.tail else state.base)
        dst = []
        for p in range(start, start + len(chunk)):
            if p < state.last:
                dst.append(state.base)
                state.settled = p + 1
            else:
                state.tail += self.states.take(1)
                dst.append(state.tail[-1])
        return src, dst

    def _reserve(self, state: _State, positions: int) -> bool:
        need = self.cache.blocks_for(positions) - len(state.blocks)
        if need <= 0:
            return True
        if need > self.cache.available:
            return False          # no room: no drafts this round (the reply is the same)
        state.blocks.extend(self.cache.allocate(need))
        return True
