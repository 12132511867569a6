"""The MLX engine's runner: mlx-lm models over a paged KV pool the engine owns.

Exact by construction: every forward call is one row.  MLX picks kernels by
shape (few rows and many rows take different matrix-product paths, attention
has separate kernels for one query and for many), so a row's bits would depend
on the batch around it.  Here each row runs alone through mlx-lm's own model
(`model(token[1, 1], cache)`), with a cache object per layer that writes the
row's key and value into the pool and hands back the keys of positions
0..pos of its own sequence.  The shapes of every operation therefore depend
only on the row's position, never on the batch, its neighbours, how a prompt
was chunked or where its blocks live: the same row gives the same bits in a
prefill chunk, a decode step, a draft's verification or a replay.

One row at a time costs little on the CPU, where MLX's matrix products take
time in proportion to their rows (no batch speed-up to lose).  On a Mac's GPU
a prompt would prefill faster in row tiles aligned to positions; that is not
built yet.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..host import host_budget
from ..rows import Segment, check_rows

log = logging.getLogger(__name__)


def mlx_missing() -> str | None:
    """Why the MLX engine cannot run here, or None when mlx and mlx-lm import."""
    try:
        import mlx.core  # noqa: F401
        import mlx_lm  # noqa: F401
    except ImportError as exc:
        return (f"the MLX engine needs mlx and mlx-lm ({exc}); install them with `pip install -e '.[mlx]'` "
                "on a Mac, or `pip install 'mlx[cpu]' mlx-lm` on Linux")
    return None


class KVPool:
    """Keys and values of every layer, [slots, kv_heads, head_dim] each, slot = block * B + offset.
    Grows (doubling, where the memory free allows) as higher block ids are first used, up to
    `num_blocks`."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, num_blocks: int, block_size: int,
                 dtype: Any) -> None:
        self.shape, self.dtype = (kv_heads, head_dim), dtype
        self.num_blocks, self.block_size = num_blocks, block_size
        self.block_bytes = 2 * layers * block_size * kv_heads * head_dim * dtype.size
        self.blocks = 0
        self.k: list[Any] = [None] * layers
        self.v: list[Any] = [None] * layers

    def shortfall(self, blocks: list[int]) -> int:
        """Bytes that growing to hold `blocks` would take beyond the memory free now; 0 when
        they fit."""
        grow = max(blocks, default=-1) + 1 - self.blocks
        return max(0, grow * self.block_bytes - host_budget()) if grow > 0 else 0

    def ensure(self, blocks: int) -> None:
        """Hold at least `blocks` blocks."""
        import mlx.core as mx

        if blocks <= self.blocks:
            return
        affordable = host_budget() // self.block_bytes
        grown = min(self.num_blocks, max(blocks, min(2 * self.blocks, self.blocks + affordable), 16))
        more = ((grown - self.blocks) * self.block_size, *self.shape)
        for arrays in (self.k, self.v):
            for i, a in enumerate(arrays):           # each its own array: writes update arrays in place
                arrays[i] = mx.zeros(more, dtype=self.dtype) if a is None else \
                    mx.concatenate([a, mx.zeros(more, dtype=self.dtype)])
        mx.eval(self.k, self.v)
        self.blocks = grown


class RowCache:
    """One row's view of one layer of the pool, in mlx-lm's cache protocol (offset,
    update_and_fetch): writes the row's key and value at its slot and returns the keys and
    values of its sequence's positions 0..pos, [1, kv_heads, pos + 1, head_dim]."""

    def __init__(self, pool: KVPool, layer: int, slot: int, slots: Any, pos: int) -> None:
        self.pool, self.layer, self.slot, self.slots, self.offset = pool, layer, slot, slots, pos

    def update_and_fetch(self, keys: Any, values: Any) -> tuple[Any, Any]:
        p, i, s = self.pool, self.layer, self.slot
        p.k[i][s:s + 1] = keys[0].transpose(1, 0, 2).astype(p.dtype)
        p.v[i][s:s + 1] = values[0].transpose(1, 0, 2).astype(p.dtype)
        return (p.k[i][self.slots].transpose(1, 0, 2)[None], p.v[i][self.slots].transpose(1, 0, 2)[None])


class MLXRunner:
    device = torch.device("cpu")        # where the logits land
    dtype = torch.float32

    def __init__(self, folder: Path, weights: str = "auto") -> None:
        import mlx.core as mx

        from .load import load_model

        self.gpu = mx.default_device() == mx.gpu
        self.model, config = load_model(folder, weights, gpu=self.gpu)
        inner = self.model.model if hasattr(self.model, "model") else self.model
        attn = inner.layers[0].self_attn
        self.layers = len(inner.layers)
        self.kv_heads = attn.n_kv_heads
        self.head_dim = attn.head_dim if hasattr(attn, "head_dim") else config["hidden_size"] // attn.n_heads
        self.act_dtype = inner.norm.weight.dtype
        self.vocab_size = int(config["vocab_size"])
        self.max_positions = int(config.get("max_position_embeddings") or 2048)
        self.pool: KVPool | None = None
        log.info("loaded %s in MLX (%s, %d layers) on %s, computing in %s", folder.name, config.get("model_type"),
                 self.layers, "the GPU" if self.gpu else "the CPU", str(self.act_dtype).removeprefix("mlx.core."))

    def describe(self) -> str:
        return f"mlx {'gpu' if self.gpu else 'cpu'} {str(self.act_dtype).removeprefix('mlx.core.')}"

    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.act_dtype.size

    def allocate_kv(self, num_blocks: int, block_size: int) -> None:
        self.pool = KVPool(self.layers, self.kv_heads, self.head_dim, num_blocks, block_size, self.act_dtype)
        log.info("KV pool: up to %d blocks of %d positions, %.1f MiB (grown as used)", num_blocks, block_size,
                 num_blocks * block_size * self.kv_bytes_per_token() / 2**20)

    def trim_kv(self, blocks: list[int]) -> None:
        """The pool keeps what it grew to."""

    def segment(self, blocks: list[int], start: int, rows: int) -> Segment:
        return Segment(list(blocks), start, rows)

    def free_memory(self) -> int:
        return host_budget()

    def kv_shortfall(self, blocks: list[int]) -> int:
        """The projected-memory check before a prefill: bytes the pool lacks for `blocks`."""
        return self.pool.shortfall(blocks)

    def forward(self, tokens: list[int], segments: list[Segment], out_rows: list[int]) -> torch.Tensor:
        """Run `tokens` (segments' rows, in order), each row alone; fp32 logits [len(out_rows), vocab]."""
        import mlx.core as mx

        pool = self.pool
        B = pool.block_size
        check_rows(tokens, segments, B, pool.num_blocks, self.max_positions, self.vocab_size)
        rows = []
        for seg in segments:
            end = seg.start + seg.rows
            table = np.asarray(seg.table, dtype=np.int64)
            pool.ensure(int(table[:-(-end // B)].max()) + 1 if end else 0)
            slots = (table[:, None] * B + np.arange(B)).reshape(-1)
            rows += [(slots, p) for p in range(seg.start, end)]
        wanted = {r: i for i, r in enumerate(out_rows)}
        logits: list[Any] = [None] * len(out_rows)
        for r, (slots, pos) in enumerate(rows):
            seen = mx.array(slots[:pos + 1].astype(np.int32))
            caches = [RowCache(pool, i, int(slots[pos]), seen, pos) for i in range(self.layers)]
            out = self.model(mx.array([[tokens[r]]]), cache=caches)
            if r in wanted:
                logits[wanted[r]] = out[0, 0].astype(mx.float32)
            mx.eval(pool.k, pool.v, *(x for x in logits if x is not None))
        if not logits:
            return torch.zeros(0, self.vocab_size)
        return torch.from_numpy(np.array(mx.stack(logits)))
