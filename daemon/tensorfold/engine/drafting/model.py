"""A smaller model with the same tokenizer guesses the next tokens.

The draft model keeps its own paged KV per sequence. Each proposal first feeds
the positions it has not seen (or saw with a guess that was not kept), then
decodes k tokens with the request's own keyed rule (engine/sampler.py): the
same seed and the same uniform for each reply position. Where the two models'
distributions are close, the shared uniform makes the draft the very token the
target will draw, at any temperature. The guesses only decide how many
positions a round settles: the target model's draw decides every token.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..cache import BlockCache
from ..sampler import sample
from ..types import SamplingParams

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _State:
    blocks: list[int] = field(default_factory=list)
    fed: list[int] = field(default_factory=list)   # the tokens whose KV the draft model holds
    prompt_len: int = 0
    sampling: SamplingParams = field(default_factory=SamplingParams)


class DraftModelDrafter:
    name = "model"

    def __init__(self, backend: Any, num_blocks: int, block_size: int, prefill_chunk: int = 256) -> None:
        self.backend = backend
        self.cache = BlockCache(num_blocks, block_size)
        backend.allocate_kv(num_blocks, block_size)
        self.prefill_chunk = prefill_chunk
        self._seqs: dict[str, _State] = {}

    def start(self, seq_id: str, tokens: Sequence[int], sampling: SamplingParams) -> None:
        self.finish(seq_id)
        self._seqs[seq_id] = _State(prompt_len=len(tokens), sampling=sampling)

    def finish(self, seq_id: str) -> None:
        state = self._seqs.pop(seq_id, None)
        if state is not None and state.blocks:
            self.cache.release(state.blocks)

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
        del state.fed[keep:]
        with torch.inference_mode():
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

    def _forward(self, state: _State, chunk: list[int], start: int) -> torch.Tensor:
        seg = self.backend.segment(state.blocks, start, len(chunk))
        logits = self.backend.forward(chunk, [seg], [len(chunk) - 1])[0]
        state.fed.extend(chunk)
        return logits

    def _reserve(self, state: _State, positions: int) -> bool:
        need = self.cache.blocks_for(positions) - len(state.blocks)
        if need <= 0:
            return True
        if need > self.cache.available:
            return False          # no room: no drafts this round (the reply is the same)
        state.blocks.extend(self.cache.allocate(need))
        return True
