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

A Qwen3.5 hybrid's deltanet layers split by key head: a rank keeps a run of
key heads and the value heads that read them (their q, k and v channels of
in_qkv, their conv taps and z rows, their dt_bias and decay), runs their
recurrence on its own part of each state slot, and the value heads' outputs
are joined in the whole model's order before out_proj (split by hidden column
like o).  b and a, one row per value head, stay whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..checkpoints.errors import CheckpointError
from ..checkpoints.qwen35 import HybridArgs
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
    dn_keys: list[int] = field(default_factory=list)           # deltanet key head boundaries
    dn_values: list[list[int]] = field(default_factory=list)   # each rank's deltanet value heads

    @classmethod
    def plan(cls, rank: int, ranks: int, *, heads: int, kv_heads: int, head_dim: int, hidden: int, ffn: int,
             vocab: int, hybrid: HybridArgs | None = None, tiled: bool = False) -> Shard:
        """`hybrid`: a Qwen3.5 hybrid's deltanet sizes; `tiled`: its value heads in llama.cpp's
        order (a GGUF's: head h reads key head h % k_heads), else grouped by key head."""
        if not 0 <= rank < ranks:
            raise ValueError(f"rank {rank} of {ranks}")
        if kv_heads < ranks:
            raise CheckpointError(f"the model has {kv_heads} kv head(s): it cannot split across {ranks} ranks "
                                  "(each rank attends with its own kv heads)")
        if head_dim % GROUP:
            raise CheckpointError(f"head_dim {head_dim}: splitting across ranks takes a multiple of {GROUP}")
        keys, values = [], []
        if hybrid is not None:
            h = hybrid
            if h.k_heads < ranks:
                raise CheckpointError(f"the model has {h.k_heads} deltanet key head(s): it cannot split across "
                                      f"{ranks} ranks (each rank runs its own key heads' recurrence)")
            if h.k_dim % GROUP or h.v_dim % GROUP:
                raise CheckpointError(f"deltanet head dims {h.k_dim}, {h.v_dim}: splitting across ranks takes "
                                      f"multiples of {GROUP}")
            keys = bounds(h.k_heads, ranks)
            per = h.v_heads // h.k_heads
            values = [[v for v in range(h.v_heads) if keys[q] <= (v % h.k_heads if tiled else v // per) < keys[q + 1]]
                      for q in range(ranks)]
        shard = cls(rank, ranks, bounds(kv_heads, ranks), bounds(hidden, ranks, GROUP), bounds(ffn, ranks, GROUP),
                    bounds(vocab, ranks, GROUP), keys, values)
        for name in ("hidden", "ffn", "vocab"):
            b = getattr(shard, name)
            if any(b[q + 1] <= b[q] for q in range(ranks)):
                raise CheckpointError(f"{name} size {b[-1]} is too small to split across {ranks} ranks")
        return shard

    def deltanet(self, hybrid: HybridArgs, rank: int | None = None) -> HybridArgs:
        """A rank's (this one's by default) deltanet sizes: its own key and value heads."""
        q = self.rank if rank is None else rank
        return replace(hybrid, k_heads=self.dn_keys[q + 1] - self.dn_keys[q], v_heads=len(self.dn_values[q]))

    def deltanet_rows(self, hybrid: HybridArgs) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """This rank's runs of in_qkv rows (its key heads' q and k channels, its value heads'
        v channels) and of z rows."""
        h, (ka, kb) = hybrid, self.own("dn_keys")
        keys = h.k_heads * h.k_dim
        z = [(v * h.v_dim, (v + 1) * h.v_dim) for v in self.dn_values[self.rank]]
        return [(ka * h.k_dim, kb * h.k_dim), (keys + ka * h.k_dim, keys + kb * h.k_dim),
                *((2 * keys + a, 2 * keys + b) for a, b in z)], z

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


def take_runs(p: quant.Packed, runs: list[tuple[int, int]]) -> quant.Packed:
    """Row runs [a, b) of a packed weight, one after another, as a weight of their own."""
    parts = [take_rows(p, a, b) for a, b in runs]
    if p.fmt == quant.FMT_BF16:
        return quant.Packed(p.fmt, p.flags, sum(x.n for x in parts), p.k, np.concatenate([x.q for x in parts]), p.s)
    return quant.Packed(p.fmt, p.flags, sum(x.n for x in parts), p.k, np.concatenate([x.q for x in parts]),
                        np.concatenate([x.s for x in parts]))


def take_bias(bias: np.ndarray | None, a: int, b: int) -> np.ndarray | None:
    return None if bias is None else np.ascontiguousarray(bias[a:b])
