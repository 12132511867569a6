"""Per-row token rules: each a function of the reply tokens before its row.

Because a rule looks only at the tokens before the position it applies to,
drafted, serial and concurrent decoding apply the same rule to the same row:
the engine cuts drafts a rule rejects before the verify forward, then masks
each remaining row's logits with the rule for that row's path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch


class Constraint(Protocol):
    def allows(self, reply: Sequence[int], token: int) -> bool:
        """May `token` come at reply position len(reply), after `reply`?"""
        ...

    def mask(self, reply: Sequence[int], logits: torch.Tensor) -> None:
        """Restrict fp32 logits [vocab] for position len(reply) in place (-inf = forbidden)."""
        ...


@dataclass(frozen=True, slots=True)
class ForceToken:
    """Force `token` at reply position `position` (a test rule and the simplest one)."""

    position: int
    token: int

    def allows(self, reply: Sequence[int], token: int) -> bool:
        return len(reply) != self.position or token == self.token

    def mask(self, reply: Sequence[int], logits: torch.Tensor) -> None:
        if len(reply) == self.position:
            keep = logits[self.token].clone()
            logits.fill_(float("-inf"))
            logits[self.token] = keep


def cut_drafts(constraints: Sequence[Constraint], reply: Sequence[int], drafts: list[int]) -> list[int]:
    """The longest prefix of `drafts` every rule allows after `reply`."""
    path = list(reply)
    for i, d in enumerate(drafts):
        if not all(c.allows(path, d) for c in constraints):
            return drafts[:i]
        path.append(d)
    return drafts


def apply(constraints: Sequence[Constraint], reply: Sequence[int], logits: torch.Tensor) -> None:
    for c in constraints:
        c.mask(reply, logits)
