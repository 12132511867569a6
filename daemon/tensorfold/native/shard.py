"""One rank's part of the model when it runs on several ranks (--ranks).

Every linear is split along its outputs, never along its inputs: rank r keeps
a contiguous run of each weight's rows, so each output element it computes is
the same full-length reduction, in the same order, as on one rank, and the
joined activation has the bits of the unsplit one.  q, k and v split by kv
head (each rank attends with its own heads over its own part of the KV
cache); o and down by hidden column; gate and up by ffn column; the logits
head by vocabulary.  The embedding stays whole on every rank.  Boundaries
fall on multiples of 16 rows, the packed formats' groups (tf_kernels.h), so a
rank's rows are whole groups of the file's weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checkpoints.errors import CheckpointError
from . import quant

GROUP = 16          # rows per packed group (Q4A, Q8; the K formats group 8)


def bounds(n: int, ranks: int, unit: int = 1) -> list[int]:
    """Boundaries splitting n into `ranks` contiguous runs, each a multiple of `unit`
    but the last, as even as that allows: [0, ..., n]."""
    units = -(-n // unit)
    return [min(n, units * q // ranks * unit) for q in range(ranks)] + [n]


@dataclass(frozen=True)
class Shard:
    rank: int
    ranks: int
    kv: list[int]          # kv head boundaries (each kv head brings its group of q heads)
    hidden: list[int]      # o and down output columns
    ffn: list[int]         # gate and up output columns
    vocab: list[int]       # logits head rows

    @classmethod
    def plan(cls, rank: int, ranks: int, *, heads: int, kv_heads: int, head_dim: int, hidden: int, ffn: int,
             vocab: int) -> Shard:
        if not 0 <= rank < ranks:
            raise ValueError(f"rank {rank} of {ranks}")
        if kv_heads < ranks:
            raise CheckpointError(f"the model has {kv_heads} kv head(s): it cannot split across {ranks} ranks "
                                  "(each rank attends with its own kv heads)")
        if head_dim % GROUP:
            raise CheckpointError(f"head_dim {head_dim}: splitting across ranks takes a multiple of {GROUP}")
        shard = cls(rank, ranks, bounds(kv_heads, ranks), bounds(hidden, ranks, GROUP), bounds(ffn, ranks, GROUP),
                    bounds(vocab, ranks, GROUP))
        for name in ("hidden", "ffn", "vocab"):
            b = getattr(shard, name)
            if any(b[q + 1] <= b[q] for q in range(ranks)):
                raise CheckpointError(f"{name} size {b[-1]} is too small to split across {ranks} ranks")
        return shard

    def own(self, name: str) -> tuple[int, int]:
        """This rank's run of the named boundaries."""
        b = getattr(self, name)
        return b[self.rank], b[self.rank + 1]


def take_rows(p: quant.Packed, a: int, b: int) -> quant.Packed:
    """Rows [a, b) of a packed weight, as a weight of their own (a copy); a and b on the
    format's group boundaries (b may be the last row)."""
    if p.fmt == quant.FMT_BF16:
        return quant.Packed(p.fmt, p.flags, b - a, p.k, p.q[a:b].copy(), p.s)
    g = 8 if p.fmt in quant.K_FORMATS else 16
    if a % g or (b % g and b != p.n) or not 0 <= a < b <= p.n:
        raise ValueError(f"rows [{a}, {b}) of {p.n} do not fall on groups of {g}")
    return quant.Packed(p.fmt, p.flags, b - a, p.k, p.q[a // g:-(-b // g)].copy(), p.s[a // g:-(-b // g)].copy())


def take_bias(bias: np.ndarray | None, a: int, b: int) -> np.ndarray | None:
    return None if bias is None else np.ascontiguousarray(bias[a:b])
