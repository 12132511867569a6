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

A Qwen3.5 hybrid's Gated DeltaNet layers take their recurrent state from the
engine's state slots (engine/states.py) the same way: each row reads its source
slot (or mlx-lm's zero state at position 0) and leaves its state in its
destination slot, so a token's state has the same bits in every path.

On the CPU each linear is split by output columns over one stream per thread
(split.py), which keeps every bit.  On a Mac's GPU a prompt would prefill
faster in row tiles aligned to positions; that is not built yet.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ...checkpoints import qwen35
from ..host import default_threads, host_budget
from ..rows import Segment, check_rows, check_state_slots

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
    """Keys and values of every layer, [kv_heads, slots, head_dim] each, slot = block * B + offset.
    Grows (doubling, where the memory free allows) as higher block ids are first used, up to
    `num_blocks`."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, num_blocks: int, block_size: int,
                 dtype: Any) -> None:
        self.kv_heads, self.head_dim, self.dtype = kv_heads, head_dim, dtype
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
        more = (self.kv_heads, (grown - self.blocks) * self.block_size, self.head_dim)
        for arrays in (self.k, self.v):
            for i, a in enumerate(arrays):           # each its own array: writes update arrays in place
                arrays[i] = mx.zeros(more, dtype=self.dtype) if a is None else \
                    mx.concatenate([a, mx.zeros(more, dtype=self.dtype)], axis=1)
        mx.eval(self.k, self.v)
        self.blocks = grown


class RowCache:
    """One row's view of one layer of the pool, in mlx-lm's cache protocol (offset,
    update_and_fetch): writes the row's key and value at its slot and returns the keys and
    values of its sequence's positions 0..pos, [1, kv_heads, pos + 1, head_dim]: `slots`
    picks them, a slice where they lie in one run of the pool (a view, not a copy), else
    their slot ids.  Either way the same values in the same shape."""

    def __init__(self, pool: KVPool, layer: int, slot: int, slots: Any, pos: int) -> None:
        self.pool, self.layer, self.slot, self.slots, self.offset = pool, layer, slot, slots, pos

    def update_and_fetch(self, keys: Any, values: Any) -> tuple[Any, Any]:
        p, i, s = self.pool, self.layer, self.slot
        p.k[i][:, s:s + 1] = keys[0].astype(p.dtype)
        p.v[i][:, s:s + 1] = values[0].astype(p.dtype)
        return p.k[i][None, :, self.slots], p.v[i][None, :, self.slots]


class StateSlots:
    """A hybrid's deltanet states: for each deltanet layer, its conv state [slots, K - 1,
    conv_dim] (in the activations' dtype) and its delta-rule state [slots, v_heads,
    v_dim, k_dim] (float32), as mlx-lm's cache holds them.  Grows (doubling) as higher
    slots are first used, up to `slots`."""

    def __init__(self, shapes: list[tuple[tuple[int, ...], Any]], layers: int, slots: int) -> None:
        self.shapes, self.layers, self.slots = shapes, layers, slots
        self.held = 0
        self.arrays: list[list[Any]] = [[None] * len(shapes) for _ in range(layers)]

    def ensure(self, slot: int) -> None:
        import mlx.core as mx

        if slot < self.held:
            return
        if slot >= self.slots:
            raise ValueError(f"state slot {slot} outside the {self.slots} allocated")
        grown = min(self.slots, max(slot + 1, 2 * self.held, 8))
        for parts in self.arrays:
            for i, (shape, dtype) in enumerate(self.shapes):
                more = mx.zeros((grown - self.held, *shape), dtype=dtype)
                parts[i] = more if parts[i] is None else mx.concatenate([parts[i], more])
        mx.eval(self.arrays)
        self.held = grown

    def read(self, layer: int, slot: int) -> list[Any]:
        """The layer's state parts in slot `slot`, [1, ...] each; Nones for the zero state."""
        if slot < 0:
            return [None] * len(self.shapes)
        self.ensure(slot)
        return [a[slot:slot + 1] for a in self.arrays[layer]]

    def write(self, layer: int, slot: int, parts: list[Any]) -> None:
        self.ensure(slot)
        for a, part in zip(self.arrays[layer], parts):
            a[slot:slot + 1] = part.astype(a.dtype)

    def copy(self, src: int, dst: int) -> None:
        import mlx.core as mx

        for layer in range(self.layers):
            self.write(layer, dst, self.read(layer, src))
        mx.eval(self.arrays)


class RowState:
    """One row's view of one deltanet layer's state, in mlx-lm's ArraysCache protocol
    (cache[0]: conv state, cache[1]: delta-rule state; no mask for a single row)."""

    lengths = None

    def __init__(self, parts: list[Any]) -> None:
        self.parts = parts

    def __getitem__(self, i: int) -> Any:
        return self.parts[i]

    def __setitem__(self, i: int, value: Any) -> None:
        self.parts[i] = value

    def advance(self, n: int) -> None:
        pass


class MLXRunner:
    device = "cpu"                      # where the logits land
    dtype = "float32"

    def __init__(self, folder: Path, weights: str = "auto", threads: int | None = None) -> None:
        import mlx.core as mx

        from .load import load_model
        from .split import split_linears

        self.gpu = mx.default_device() == mx.gpu
        self.model, config = load_model(folder, weights, gpu=self.gpu)
        self.threads = 1 if self.gpu else threads or default_threads()
        split_linears(self.model, self.threads)
        inner = self.model.model if hasattr(self.model, "model") else self.model
        linear = [getattr(layer, "is_linear", False) for layer in inner.layers]
        self.attention = [i for i, lin in enumerate(linear) if not lin]        # layers with KV
        self.deltanet = [i for i, lin in enumerate(linear) if lin]             # layers with state
        attn = inner.layers[self.attention[0]].self_attn
        text = qwen35.text_config(config)
        self.kv_layers = len(self.attention)
        self.kv_heads = getattr(attn, "n_kv_heads", None) or attn.num_key_value_heads
        self.head_dim = attn.head_dim if hasattr(attn, "head_dim") else text["hidden_size"] // attn.n_heads
        self.act_dtype = inner.norm.weight.dtype
        self.vocab_size = int(text["vocab_size"])
        self.max_positions = int(text.get("max_position_embeddings") or 2048)
        self.pool: KVPool | None = None
        self.states: StateSlots | None = None
        if self.deltanet:
            net = inner.layers[self.deltanet[0]].linear_attn
            self.state_shapes = [((net.conv_kernel_size - 1, net.conv_dim), self.act_dtype),
                                 ((net.num_v_heads, net.head_v_dim, net.head_k_dim), mx.float32)]
        log.info("loaded %s in MLX (%s, %d layers) on %s, computing in %s", folder.name, config.get("model_type"),
                 len(inner.layers), "the GPU" if self.gpu else f"the CPU ({self.threads} streams)",
                 str(self.act_dtype).removeprefix("mlx.core."))

    def describe(self) -> str:
        where = "gpu" if self.gpu else f"cpu x{self.threads}"
        return f"mlx {where} {str(self.act_dtype).removeprefix('mlx.core.')}"

    def kv_bytes_per_token(self) -> int:
        return 2 * self.kv_layers * self.kv_heads * self.head_dim * self.act_dtype.size

    def allocate_kv(self, num_blocks: int, block_size: int) -> None:
        self.pool = KVPool(self.kv_layers, self.kv_heads, self.head_dim, num_blocks, block_size, self.act_dtype)
        log.info("KV pool: up to %d blocks of %d positions, %.1f MiB (grown as used)", num_blocks, block_size,
                 num_blocks * block_size * self.kv_bytes_per_token() / 2**20)

    def trim_kv(self, blocks: list[int]) -> None:
        """The pool keeps what it grew to."""

    def segment(self, blocks: list[int], start: int, rows: int, src: int = -1, dst: list[int] | None = None,
                images: tuple = ()) -> Segment:
        if images:
            raise ValueError("the MLX engine takes no images")
        return Segment(list(blocks), start, rows, src, dst)

    # -- a hybrid's deltanet states (engine/states.py) -------------------------------------
    def state_bytes(self) -> int:
        """One sequence's state over every deltanet layer; 0 for a model without them."""
        if not self.deltanet:
            return 0
        return len(self.deltanet) * sum(int(np.prod(shape)) * dtype.size for shape, dtype in self.state_shapes)

    def allocate_state(self, slots: int) -> None:
        self.states = StateSlots(self.state_shapes, len(self.deltanet), slots)

    def copy_state(self, src: int, dst: int) -> None:
        self.states.copy(src, dst)

    def trim_state(self, slots: list[int]) -> None:
        """The slots keep what they grew to."""

    def free_memory(self) -> int:
        return host_budget()

    def kv_shortfall(self, blocks: list[int]) -> int:
        """The projected-memory check before a prefill: bytes the pool lacks for `blocks`."""
        return self.pool.shortfall(blocks)

    def forward(self, tokens: list[int], segments: list[Segment], out_rows: list[int]) -> np.ndarray:
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
            run = int(np.argmin(np.append(np.diff(table) == 1, False))) + 1   # blocks in one run from the first
            if self.deltanet:          # row j reads the state row j - 1 left
                check_state_slots(seg, self.states.slots if self.states else 0)
                rows += zip([(slots, run)] * seg.rows, range(seg.start, end), [seg.src, *seg.dst[:-1]], seg.dst)
            else:
                rows += [((slots, run), p, -1, -1) for p in range(seg.start, end)]
        wanted = {r: i for i, r in enumerate(out_rows)}
        logits: list[Any] = [None] * len(out_rows)
        states = self.states
        for r, ((slots, run), pos, src, dst) in enumerate(rows):
            first = int(slots[0])
            seen = slice(first, first + pos + 1) if pos // B < run else mx.array(slots[:pos + 1].astype(np.int32))
            caches: list[Any] = [None] * (len(self.attention) + len(self.deltanet))
            for kv, i in enumerate(self.attention):
                caches[i] = RowCache(pool, kv, int(slots[pos]), seen, pos)
            for j, i in enumerate(self.deltanet):
                caches[i] = RowState(states.read(j, src))
            out = self.model(mx.array([[tokens[r]]]), cache=caches)
            for j, i in enumerate(self.deltanet):
                states.write(j, dst, caches[i].parts)
            if r in wanted:
                logits[wanted[r]] = out[0, 0].astype(mx.float32)
            mx.eval(pool.k, pool.v, states.arrays if states else [], *(x for x in logits if x is not None))
        if not logits:
            return np.zeros((0, self.vocab_size), dtype=np.float32)
        return np.array(mx.stack(logits), dtype=np.float32)
