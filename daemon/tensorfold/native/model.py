"""The CPU model on the native kernels: Llama-family and Qwen3.5 hybrid weights
kept quantized.

A GGUF's weights load in their own formats, repacked losslessly (quant.py);
a safetensors checkpoint's matmul weights are quantized at load to the
format the user picks (--weights).  Norms, biases and rope tables stay fp32.
Where Linux gives 2 MB pages, the packed weights share one map advised for them.
The KV cache is fp16 in one anonymous memory map: the operating system
backs a block with memory only once a sequence writes it.  A hybrid's
deltanet states live in slots of another such map (tf_kernels.h).
"""

from __future__ import annotations

import ctypes as C
import logging
import mmap
from pathlib import Path

import numpy as np

from ..backends.model_args import ModelArgs, inverse_frequencies
from ..checkpoints.errors import CheckpointError
from ..checkpoints.files import gguf_file, iter_safetensors_f32
from ..checkpoints.qwen35 import ATTENTION, DELTANET, HybridArgs, hf_weights, split_q_gate
from ..config import KV_CACHES
from . import lib, quant
from .rope import RopeTables
from .shard import Shard, take_bias, take_rows, take_runs

log = logging.getLogger(__name__)

_HEAD = "tensorfold.head"     # the logits head: lm_head, the tied embedding, or this rank's rows of either
_MLP = {"gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
_PARTS = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj", **_MLP}
_DELTANET = {"q": "linear_attn.in_proj_qkv", "z": "linear_attn.in_proj_z", "b": "linear_attn.in_proj_b",
             "a": "linear_attn.in_proj_a", "o": "linear_attn.out_proj", **_MLP}


def _load_gguf(path: Path, args: ModelArgs, hybrid: HybridArgs | None, whole: bool,
               huge: bool) -> tuple[dict[str, quant.Packed | np.ndarray], Arena | None]:
    """A GGUF's weights, repacked; a hybrid's conv kept fp32 and each attention q split
    into its queries and their gates (rows are independent, so the raw blocks split as
    they are).  `whole` (no rank's part cut out after): packed into an arena (advised for
    2 MB pages where `huge`), returned with them."""
    from ..checkpoints.gguf_convert import iter_gguf_weights
    from ..checkpoints.gguf_index import read_index

    index = read_index(path)
    into = Arena(_gguf_bound(index[1]), huge) if whole else None
    out: dict[str, quant.Packed | np.ndarray] = {}
    for name, qtype, data, shape in iter_gguf_weights(path, index):
        if len(shape) == 1 or name.endswith("linear_attn.conv1d.weight"):
            out[name] = np.ascontiguousarray(np.asarray(data, dtype=np.float32).reshape(-1))
            continue
        parts = [(name, np.asarray(data), shape)]
        if hybrid is not None and name.endswith("self_attn.q_proj.weight"):
            queries, gates = split_q_gate(np.asarray(data), args.heads, args.head_dim)
            half = (args.heads * args.head_dim, shape[1])
            parts = [(name, queries, half), (name.replace("q_proj", "q_gate"), gates, half)]
        for part, raw, dims in parts:
            try:
                out[part] = quant.pack_gguf(qtype, raw, *dims, into=into)
            except ValueError as exc:
                raise CheckpointError(f"{path.name}: {part}: {exc}") from None
    return out, into


def _load_safetensors(folder: Path, kind: str, args: ModelArgs, hybrid: HybridArgs | None
                      ) -> dict[str, quant.Packed | np.ndarray]:
    out: dict[str, quant.Packed | np.ndarray] = {}
    tensors = iter_safetensors_f32(folder)
    if hybrid is not None:
        tensors = hf_weights(tensors, args.heads, args.head_dim)
    for name, array in tensors:
        if array.ndim == 2:
            if array.shape[1] % 32:
                raise CheckpointError(f"{name}: {array.shape[1]} inputs is not a multiple of 32; "
                                      "the CPU kernels need whole blocks of 32")
            out[name] = quant.quantize_float(array, kind)
        else:
            out[name] = np.ascontiguousarray(array)
    return out


class NativeModel:
    """Weights, the C structures that point at them, and the KV map."""

    def __init__(self, folder: Path, args: ModelArgs, weights: str = quant.DEFAULT_FLOAT_KIND,
                 shard: Shard | None = None, hybrid: HybridArgs | None = None, kv_cache: str = "fp16") -> None:
        self.lib = lib.load()
        if weights not in quant.FLOAT_KINDS:
            raise CheckpointError(f"--weights {weights!r}: use one of {', '.join(quant.FLOAT_KINDS)}")
        if kv_cache not in KV_CACHES:
            raise CheckpointError(f"--kv-cache {kv_cache!r}: use one of {', '.join(KV_CACHES)}")
        if kv_cache == "int8" and args.head_dim > 512:
            raise CheckpointError(f"--kv-cache int8: head_dim {args.head_dim}; the CPU engine takes up to 512")
        self.kv_cache = kv_cache
        source = gguf_file(folder)
        self.source = "gguf" if source else weights
        # where Linux gives 2 MB pages: the weights in one map, the KV block by block (allocate_kv)
        self._block_major = _huge_pages()
        # a whole GGUF's weights are packed where they stay (a rank's part is cut out after)
        w, arena = _load_gguf(source, args, hybrid, shard is None, self._block_major) if source else \
            (_load_safetensors(folder, weights, args, hybrid), None)
        self.args = args
        self.kinds = hybrid.kinds if hybrid else (ATTENTION,) * args.layers
        self.shard = shard
        v_all = hybrid.v_heads if hybrid else 0
        self._keep: list[object] = []
        a = args
        tied = a.tie_word_embeddings or "lm_head.weight" not in w
        w[_HEAD] = w.get("model.embed_tokens.weight") if tied else w.pop("lm_head.weight")
        if shard is not None:
            _take_shard(w, a, shard, hybrid)
            hybrid = hybrid and shard.deltanet(hybrid)         # this rank's own deltanet heads
        self.hybrid = hybrid
        arrays = {id(v): v for v in w.values()}.values()        # a tied head once
        self.weight_bytes = sum(quant.nbytes(v) if isinstance(v, quant.Packed) else v.nbytes for v in arrays)
        packed = [v for v in arrays if isinstance(v, quant.Packed)]
        self._weights_map = arena.map if arena else _one_map(packed) if self._block_major else None
        layers = (lib.Layer * a.layers)()
        for i, kind in enumerate(self.kinds):
            p = f"model.layers.{i}."
            L = layers[i]
            L.kind, L.slot = kind, self.kinds[:i].count(kind)
            for field, part in (_DELTANET if kind == DELTANET else _PARTS).items():
                setattr(L, field, self._weight(w, p + part + ".weight", w.get(p + part + ".bias")))
            L.attn_norm = self._f32(w[p + "input_layernorm.weight"])
            L.mlp_norm = self._f32(w[p + "post_attention_layernorm.weight"])
            if p + "self_attn.q_norm.weight" in w:
                L.q_norm = self._f32(w[p + "self_attn.q_norm.weight"])
                L.k_norm = self._f32(w[p + "self_attn.k_norm.weight"])
            if p + "self_attn.q_gate.weight" in w:
                L.qgate = self._weight(w, p + "self_attn.q_gate.weight")
            if kind == DELTANET:
                d = p + "linear_attn."
                taps = np.asarray(w[d + "conv1d.weight"], np.float32).reshape(-1, hybrid.conv_k).T
                L.conv, L.dt_bias = self._f32(taps), self._f32(w[d + "dt_bias"])
                L.decay_a, L.gnorm = self._f32(w[d + "decay_a"]), self._f32(w[d + "norm.weight"])
        self._keep.append(layers)
        m = self.struct = lib.Model()
        m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim = a.layers, a.hidden_size, a.heads, a.kv_heads, a.head_dim
        m.ffn, m.vocab, m.max_pos, m.eps = a.intermediate_size, a.vocab_size, a.max_positions, a.rms_norm_eps
        m.ranks = 1
        if shard is not None:
            (k0, k1), (f0, f1), (v0, v1) = shard.own("kv"), shard.own("ffn"), shard.own("vocab")
            m.heads, m.kv_heads, m.ffn, m.vocab = (k1 - k0) * (a.heads // a.kv_heads), k1 - k0, f1 - f0, v1 - v0
            m.ranks, m.rank = shard.ranks, shard.rank
            for field in ("kv", "hidden", "ffn"):
                getattr(m, field + "_split")[:shard.ranks + 1] = getattr(shard, field)
        m.layer = C.cast(layers, C.POINTER(lib.Layer))
        m.embed = self._weight(w, "model.embed_tokens.weight")
        m.head = self._weight(w, _HEAD)
        m.norm = self._f32(w["model.norm.weight"])
        m.rot_dim = hybrid.rot_dim if hybrid else a.head_dim
        self.rope = RopeTables(inverse_frequencies(a, m.rot_dim), a.max_positions)
        m.cos, m.sin = self.rope.cos.ctypes.data, self.rope.sin.ctypes.data
        if hybrid is not None:
            m.mrope[:] = hybrid.mrope
            d = m.dn
            d.k_heads, d.v_heads, d.k_dim, d.v_dim = hybrid.k_heads, hybrid.v_heads, hybrid.k_dim, hybrid.v_dim
            d.conv_k, d.tiled = hybrid.conv_k, bool(source)      # llama.cpp tiles a GGUF's value heads
            d.slot_stride = self.state_bytes() // 4
            d.v_all = v_all
            if shard is not None:
                order = np.array([v for own in shard.dn_values for v in own], np.int32)
                self._keep.append(order)
                d.v_order = order.ctypes.data
                d.v_split[:shard.ranks + 1] = np.cumsum([0] + [len(own) for own in shard.dn_values]).tolist()
        self._state: mmap.mmap | None = None
        self.state_slots = 0
        if a.head_dim % 8:
            raise CheckpointError(f"head_dim {a.head_dim}: the CPU engine takes a multiple of 8")
        if m.embed.n != a.vocab_size or m.head.n != m.vocab:
            raise CheckpointError(f"embedding rows {m.embed.n} / head rows {m.head.n} differ from the vocabulary "
                                  f"size {a.vocab_size}")
        self._kv: mmap.mmap | None = None
        self._scales: mmap.mmap | None = None

    def _f32(self, array: np.ndarray) -> int:
        array = np.array(array, dtype=np.float32, order="C")      # a copy: no view keeps a GGUF's map
        self._keep.append(array)
        return array.ctypes.data

    def _weight(self, w: dict, name: str, bias: np.ndarray | None = None) -> lib.Weight:
        p = w.get(name)
        if not isinstance(p, quant.Packed):
            raise CheckpointError(f"the checkpoint lacks the 2-D weight {name}")
        self._keep += [p.q, p.s]
        return lib.Weight(p.fmt, p.flags, p.n, p.k, p.q.ctypes.data, p.s.ctypes.data if p.s.size else None,
                          self._f32(bias) if bias is not None else None)

    # -- KV ------------------------------------------------------------------------
    @property
    def attention_layers(self) -> int:
        return self.kinds.count(ATTENTION)

    def kv_bytes_per_token(self, every_rank: bool = False) -> int:
        """Keys and values of one position in every attention layer (fp16, or int8 codes and
        an fp32 scale a kv head): this rank's kv heads, or with `every_rank` the whole model's."""
        a = self.args
        head = a.head_dim + 4 if self.kv_cache == "int8" else a.head_dim * 2
        return 2 * self.attention_layers * (a.kv_heads if every_rank else self.struct.kv_heads) * head

    def allocate_kv(self, num_blocks: int, block_size: int) -> None:
        """A KV map of `num_blocks` blocks (tf_kernels.h).  Where Linux backs it with 2 MB
        pages (_huge_pages), block by block: a block's keys and values of every layer side
        by side, so a new sequence's first block costs one such page, not one per layer
        half.  Otherwise layer by layer: each layer's keys of all blocks, then its values.
        fp16 blocks are padded to whole pages, so a block's memory can go back to the system
        by itself.  int8: the codes' blocks unpadded, their scales in a map of their own,
        layer by layer."""
        if block_size % 16:
            raise ValueError(f"block_size {block_size}: the CPU engine takes a multiple of 16")
        a, m, int8 = self.args, self.struct, self.kv_cache == "int8"
        block = m.kv_heads * block_size * a.head_dim * (1 if int8 else 2)
        halves = 2 * self.attention_layers
        pages = (lambda n: n) if int8 else (lambda n: _round_up(n, mmap.PAGESIZE))
        if self._block_major:
            m.block_stride, m.kv_stride = pages(halves * block), block
        else:
            m.block_stride = pages(block)
            m.kv_stride = num_blocks * m.block_stride
        m.kv = m.kv_scale = None
        self._kv_view = self._scale_view = None
        for old in (self._kv, self._scales):
            if old is not None:
                old.close()
        # private anonymous memory: the system backs a page when a sequence first writes it
        self._kv, self._kv_view = _anonymous(num_blocks * m.block_stride * (1 if self._block_major else halves))
        if self._block_major:
            self._kv.madvise(mmap.MADV_HUGEPAGE)
        m.kv = C.addressof(self._kv_view)
        m.scale_region = num_blocks * m.kv_heads * block_size
        if int8:
            self._scales, self._scale_view = _anonymous(halves * m.scale_region * 4)
            m.kv_scale = C.addressof(self._scale_view)
        m.block_size = block_size
        self.num_blocks = num_blocks

    def trim_kv(self, blocks: list[int]) -> None:
        """Return the pages of `blocks` to the system (MADV_DONTNEED: they read as zeros
        and are backed again when a sequence writes them): the whole pages within each run
        of neighbouring blocks, in every layer's keys and values (and int8 scales)."""
        if self._kv is None or not blocks:
            return
        runs: list[list[int]] = []                     # neighbouring blocks: one call per region
        for b in sorted(set(blocks)):
            if runs and runs[-1][1] == b:
                runs[-1][1] = b + 1
            else:
                runs.append([b, b + 1])
        m, halves = self.struct, 2 * self.attention_layers
        # (map, a block's bytes in a region, the regions' starts): block by block, one region
        starts = [0] if self._block_major else [h * m.kv_stride for h in range(halves)]
        maps = [(self._kv, m.block_stride, starts)]
        if self._scales is not None:
            region = m.scale_region * 4
            maps.append((self._scales, m.kv_heads * m.block_size * 4, [h * region for h in range(halves)]))
        for area, size, starts in maps:
            for first, end in runs:
                for base in starts:
                    start = _round_up(base + first * size, mmap.PAGESIZE)
                    stop = (base + end * size) // mmap.PAGESIZE * mmap.PAGESIZE
                    if stop > start:
                        area.madvise(mmap.MADV_DONTNEED, start, stop - start)

    # -- deltanet states -------------------------------------------------------------
    def state_bytes(self) -> int:
        """One sequence's deltanet state, padded to whole pages (a slot, so each can go back
        to the system by itself); 0 for a model without deltanet layers."""
        return slot_bytes(self.hybrid)

    def allocate_state(self, slots: int) -> None:
        """`slots` state slots in an anonymous map (backed as written)."""
        if self._state is not None:
            self.struct.dn.state = None
            self._state_view = None
            self._state.close()
        self._state, self._state_view = _anonymous(slots * self.state_bytes())
        self.struct.dn.state = C.addressof(self._state_view)
        self.state_slots = slots

    def copy_state(self, src: int, dst: int) -> None:
        """Slot dst := slot src."""
        if not (0 <= src < self.state_slots and 0 <= dst < self.state_slots):
            raise ValueError(f"state slots {src}, {dst}: outside the {self.state_slots} slots")
        size = self.state_bytes()
        base = C.addressof(self._state_view)
        C.memmove(base + dst * size, base + src * size, size)

    def trim_state(self, slots: list[int]) -> None:
        """Give the pages of these slots back to the system (they read as zeros until written)."""
        size = self.state_bytes()
        for slot in slots if self._state is not None else []:
            self._state.madvise(mmap.MADV_DONTNEED, slot * size, size)

    # -- forward -------------------------------------------------------------------
    def forward(self, tokens: np.ndarray, pos: np.ndarray, tab_off: np.ndarray, tables: np.ndarray,
                out_rows: np.ndarray, state_src: np.ndarray | None = None, state_dst: np.ndarray | None = None,
                embed_row: np.ndarray | None = None, embeds: np.ndarray | None = None,
                mrope: np.ndarray | None = None) -> np.ndarray:
        """int32 arrays in; fp32 logits [len(out_rows), vocab] out.  A hybrid's rows also name
        the state slots they read and write; an image's rows take their inputs from `embeds`
        (embed_row >= 0) and M-RoPE positions (mrope [rows, 3]) (tf_kernels.h, tf_inputs)."""
        if self._kv is None:
            raise RuntimeError("allocate_kv first")
        if self.state_bytes() and (state_src is None or self._state is None):
            raise RuntimeError("a hybrid's forward needs allocate_state and each row's state slots")
        if len(pos):
            self.rope.cover(int(max(pos.max(), mrope.max() if mrope is not None and mrope.size else 0)) + 1)
        logits = np.empty((len(out_rows), self.struct.vocab), dtype=np.float32)
        i32 = C.c_int32
        extra = lib.Inputs()
        for field, array in (("state_src", state_src), ("state_dst", state_dst), ("embed_row", embed_row),
                             ("mrope", mrope), ("embeds", embeds)):
            if array is not None:
                setattr(extra, field, array.ctypes.data)
        rc = self.lib.tf_forward(C.byref(self.struct), lib.ptr(tokens, i32), len(tokens), lib.ptr(pos, i32),
                                 lib.ptr(tab_off, i32), lib.ptr(tables, i32), lib.ptr(out_rows, i32),
                                 len(out_rows), lib.ptr(logits), C.byref(extra))
        if rc == -2:
            raise RanksFailed("a rank did not take part in a gather")
        if rc != 0:
            raise MemoryError("the forward could not allocate its buffers")
        return logits

    def set_gather(self, gather: lib.GATHER) -> None:
        """The all-gather a split forward calls (kept alive here)."""
        self._gather = gather
        self.struct.gather = gather


class Arena:
    """One zero-filled anonymous map that a GGUF's packed arrays are cut from as they are
    packed, each from a 64-byte boundary (quant.pack_gguf's `into`), advised for 2 MB pages
    (`huge`) before anything is written: each weight byte is written once, where it
    stays.  (Packed into arrays of their own and then moved into one map, every byte
    went into two sets of fresh pages, and clearing them was most of Qwen2.5-Coder-1.5B's
    load on a 2-core VM: docs/benchmarks.md.)  Its size is an upper bound (_gguf_bound):
    the pages past the last array are never touched, so they take no memory."""

    def __init__(self, size: int, huge: bool) -> None:
        self.map, _ = _anonymous(size)
        if huge:
            self.map.madvise(mmap.MADV_HUGEPAGE)
        self.used = 0

    def zeros(self, shape: tuple[int, int]) -> np.ndarray:
        size = shape[0] * shape[1]
        if self.used + size > len(self.map):
            raise RuntimeError(f"the weights' arena of {len(self.map)} bytes is too small (a packed size bound is wrong)")
        array = np.frombuffer(self.map, np.uint8, size, self.used).reshape(shape)
        self.used = _round_up(self.used + size, 64)
        return array


def _gguf_bound(tensors: list) -> int:
    """The most bytes a GGUF's matrices (its gguf_index tensors) take packed
    (quant.packed_bound), with room for one more group each (a hybrid's q splits into two
    halves, each padded to whole groups)."""
    return sum(quant.packed_bound(t.tensor_type, n, k) + quant.packed_bound(t.tensor_type, 16, k)
               for t in tensors if len(t.shape) == 2 for k, n in [t.shape])


def _one_map(packed: list[quant.Packed]) -> mmap.mmap:
    """Move the packed weights' arrays into one anonymous map that Linux backs with 2 MB
    pages: a model of small tensors (SmolLM2's are under 1 MB, each its own 4 KB-paged
    allocation) then streams its weights without a page walk every 4 KB, and the
    hardware prefetcher runs on across what were page boundaries (SmolLM2 Q4_1, one
    Zen 4 thread, `bench decode`: 170 -> 187-201 tok/s).  The Qwen2.5 GGUFs' big tensors
    had 2 MB pages already (numpy advises arrays of 4 MB and up): no change there."""
    arrays = [(p, name) for p in packed for name in ("q", "s") if getattr(p, name).nbytes]
    size = sum(_round_up(getattr(p, name).nbytes, 64) for p, name in arrays)
    area, _ = _anonymous(size)
    area.madvise(mmap.MADV_HUGEPAGE)
    at = 0
    for p, name in arrays:
        a = getattr(p, name)
        view = np.frombuffer(area, a.dtype, a.size, at).reshape(a.shape)
        view[...] = a
        setattr(p, name, view)          # the old array goes as its last reference does
        at += _round_up(a.nbytes, 64)              # each array on a cache line of its own
    return area


def _huge_pages(thp: Path = Path("/sys/kernel/mm/transparent_hugepage")) -> bool:
    """Whether an anonymous map advised for huge pages gets 2 MB ones: Linux with
    transparent huge pages on ("always" or "madvise") of that size (an arm64 kernel
    with 64 KB base pages has 512 MB ones: a sequence's first block would cost one)."""
    try:
        mode, size = (thp / "enabled").read_text(), int((thp / "hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return False
    return hasattr(mmap, "MADV_HUGEPAGE") and "[never]" not in mode and size == 2 << 20


def _round_up(n: int, unit: int) -> int:
    """n rounded up to a multiple of unit."""
    return -(-n // unit) * unit


def _anonymous(size: int) -> tuple[mmap.mmap, C.Array]:
    """A private anonymous map of `size` bytes (at least one) and a ctypes view of it."""
    area = mmap.mmap(-1, max(1, size), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return area, (C.c_char * len(area)).from_buffer(area)


class RanksFailed(RuntimeError):
    """A gather between ranks failed: the ranks are out of step."""


def slot_bytes(hybrid: HybridArgs | None) -> int:
    """One sequence's deltanet state (of `hybrid`'s heads), padded to whole pages; 0 without."""
    if not (hybrid and hybrid.deltanet_layers):
        return 0
    return _round_up(4 * hybrid.state_floats, mmap.PAGESIZE)


def _take_shard(w: dict, a: ModelArgs, shard: Shard, hybrid: HybridArgs | None) -> None:
    """Keep this rank's rows of every split weight (shard.py), in place."""
    group_rows = a.heads // a.kv_heads * a.head_dim
    (k0, k1), (h0, h1), (f0, f1), (v0, v1) = (shard.own(n) for n in ("kv", "hidden", "ffn", "vocab"))
    rows = {"q": (k0 * group_rows, k1 * group_rows), "k": (k0 * a.head_dim, k1 * a.head_dim),
            "v": (k0 * a.head_dim, k1 * a.head_dim), "o": (h0, h1), "down": (h0, h1), "gate": (f0, f1),
            "up": (f0, f1)}
    attention = {**_PARTS, "qgate": "self_attn.q_gate"}
    rows["qgate"] = rows["q"]
    for i, kind in enumerate(hybrid.kinds if hybrid else (ATTENTION,) * a.layers):
        p = f"model.layers.{i}."
        if kind == DELTANET:
            _take_deltanet(w, p + "linear_attn.", hybrid, shard)
        for field, part in ({"o": _DELTANET["o"], **_MLP} if kind == DELTANET else attention).items():
            name = p + part
            r0, r1 = rows[field]
            if isinstance(w.get(name + ".weight"), quant.Packed):     # a missing one is refused later
                w[name + ".weight"] = take_rows(w[name + ".weight"], r0, r1)
            if name + ".bias" in w:
                w[name + ".bias"] = take_bias(w[name + ".bias"], r0, r1)
    if isinstance(w[_HEAD], quant.Packed):
        w[_HEAD] = take_rows(w[_HEAD], v0, v1)


def _take_deltanet(w: dict, d: str, hybrid: HybridArgs, shard: Shard) -> None:
    """This rank's part of one deltanet layer (prefix `d`): its heads' in_qkv rows, conv
    channels, z rows, dt_bias and decay; b, a and the gated norm stay whole."""
    qkv, z = shard.deltanet_rows(hybrid)
    for name, runs in (("in_proj_qkv.weight", qkv), ("in_proj_z.weight", z)):
        if isinstance(w.get(d + name), quant.Packed):
            w[d + name] = take_runs(w[d + name], runs)
    channels = np.concatenate([np.arange(a, b) for a, b in qkv])
    conv = np.asarray(w[d + "conv1d.weight"], np.float32).reshape(hybrid.conv_dim, hybrid.conv_k)
    w[d + "conv1d.weight"] = np.ascontiguousarray(conv[channels]).reshape(-1)
    own = shard.dn_values[shard.rank]
    for name in ("dt_bias", "decay_a"):
        w[d + name] = np.ascontiguousarray(np.asarray(w[d + name], np.float32)[own])
