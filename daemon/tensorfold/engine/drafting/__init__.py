"""Drafters propose the next tokens of a reply; the engine verifies them exactly.

A drafter never changes a reply: every drafted position gets the keyed draw of
engine/sampler.py, and a draft token is kept only while it equals that draw.
A drafter only changes how many positions one round settles.

Drafter protocol (per engine, per sequence state kept by the drafter):
    start(seq_id, tokens, sampling)  a sequence begins: its prompt and sampling settings
    propose(seq_id, tokens, k)       up to k draft tokens after `tokens`
    accepted(seq_id, tokens)         the reply now ends at `tokens` (drafts settled)
    finish(seq_id)                   forget the sequence
    idle()                           nothing runs: memory the finished sequences used may go
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..types import SamplingParams


class Drafter(Protocol):
    name: str

    def start(self, seq_id: str, tokens: Sequence[int], sampling: SamplingParams) -> None: ...
    def propose(self, seq_id: str, tokens: Sequence[int], k: int) -> list[int]: ...
    def accepted(self, seq_id: str, tokens: Sequence[int]) -> None: ...
    def finish(self, seq_id: str) -> None: ...
    def idle(self) -> None: ...
