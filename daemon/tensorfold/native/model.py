"""The CPU model on the native kernels: Llama-family weights kept quantized.

A GGUF's weights load in their own formats, repacked losslessly (quant.py);
a safetensors checkpoint's matmul weights are quantized at load to the
format the user picks (--weights).  Norms, biases and rope tables stay fp32.
The KV cache is fp16 in one anonymous memory map: the operating system
backs a block with memory only once a sequence writes it.
"""

from __future__ import annotations

import ctypes as C
import logging
import mmap
from pathlib import Path

import numpy as np
import torch

from ..backends.torch.kernels import rope_tables
from ..backends.torch.models.llama import ModelArgs, inverse_frequencies
from ..checkpoints.errors import CheckpointError
from ..checkpoints.files import gguf_file, iter_safetensors
from . import lib, quant
from .shard import Shard, take_bias, take_rows

log = logging.getLogger(__name__)

_HEAD = "tensorfold.head"     # the logits head: lm_head, the tied embedding, or this rank's rows of either
_PARTS = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
          "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def _load_gguf(path: Path) -> dict[str, quant.Packed | np.ndarray]:
    from ..checkpoints.gguf_convert import iter_gguf_weights

    out: dict[str, quant.Packed | np.ndarray] = {}
    for name, qtype, data, shape in iter_gguf_weights(path):
        if len(shape) == 1:
            out[name] = np.array(data, dtype=np.float32)
            continue
        try:
            out[name] = quant.pack_gguf(qtype, np.asarray(data), *shape)
        except ValueError as exc:
            raise CheckpointError(f"{path.name}: {name}: {exc}") from None
    return out


def _load_safetensors(folder: Path, kind: str) -> dict[str, quant.Packed | np.ndarray]:
    out: dict[str, quant.Packed | np.ndarray] = {}
    for name, tensor in iter_safetensors(folder):
        array = tensor.to(torch.float32).numpy()
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
                 shard: Shard | None = None) -> None:
        self.lib = lib.load()
        if weights not in quant.FLOAT_KINDS:
            raise CheckpointError(f"--weights {weights!r}: use one of {', '.join(quant.FLOAT_KINDS)}")
        source = gguf_file(folder)
        self.source = "gguf" if source else weights
        w = _load_gguf(source) if source else _load_safetensors(folder, weights)
        self.args = args
        self.shard = shard
        self._keep: list[object] = []
        a = args
        tied = a.tie_word_embeddings or "lm_head.weight" not in w
        w[_HEAD] = w.get("model.embed_tokens.weight") if tied else w.pop("lm_head.weight")
        if shard is not None:
            _take_shard(w, a, shard)
        arrays = {id(v): v for v in w.values()}.values()        # a tied head once
        self.weight_bytes = sum(quant.nbytes(v) if isinstance(v, quant.Packed) else v.nbytes for v in arrays)
        layers = (lib.Layer * a.layers)()
        for i in range(a.layers):
            p = f"model.layers.{i}."
            L = layers[i]
            for field, part in _PARTS.items():
                setattr(L, field, self._weight(w, p + part + ".weight", w.get(p + part + ".bias")))
            L.attn_norm = self._f32(w[p + "input_layernorm.weight"])
            L.mlp_norm = self._f32(w[p + "post_attention_layernorm.weight"])
            if p + "self_attn.q_norm.weight" in w:
                L.q_norm = self._f32(w[p + "self_attn.q_norm.weight"])
                L.k_norm = self._f32(w[p + "self_attn.k_norm.weight"])
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
        cos, sin = rope_tables(inverse_frequencies(a), a.max_positions)
        m.cos, m.sin = self._f32(cos.numpy()), self._f32(sin.numpy())
        if a.head_dim % 8:
            raise CheckpointError(f"head_dim {a.head_dim}: the CPU engine takes a multiple of 8")
        if m.embed.n != a.vocab_size or m.head.n != m.vocab:
            raise CheckpointError(f"embedding rows {m.embed.n} / head rows {m.head.n} differ from the vocabulary "
                                  f"size {a.vocab_size}")
        self._kv: mmap.mmap | None = None

    def _f32(self, array: np.ndarray) -> int:
        array = np.ascontiguousarray(array, dtype=np.float32)
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
    def kv_bytes_per_token(self, every_rank: bool = False) -> int:
        """fp16 keys and values of one position: this rank's kv heads, or with `every_rank`
        the whole model's."""
        a = self.args
        return 2 * a.layers * (a.kv_heads if every_rank else self.struct.kv_heads) * a.head_dim * 2

    def allocate_kv(self, num_blocks: int, block_size: int) -> None:
        """A KV map of `num_blocks` blocks, laid out layer by layer (tf_kernels.h): each
        layer's keys of all blocks, then its values, a block's part of each padded to
        whole pages, so a block's memory can go back to the system by itself."""
        if block_size % 16:
            raise ValueError(f"block_size {block_size}: the CPU engine takes a multiple of 16")
        a = self.args
        page = mmap.PAGESIZE // 2                                     # fp16 elements per page
        block = -(-self.struct.kv_heads * block_size * a.head_dim // page) * page
        if self._kv is not None:
            self.struct.kv = None
            self._kv_view = None
            self._kv.close()
        # private anonymous memory: the system backs a page when a sequence first writes it
        self._kv = mmap.mmap(-1, max(1, 2 * a.layers * num_blocks * block * 2),
                             flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._kv_view = (C.c_char * len(self._kv)).from_buffer(self._kv)
        self.struct.kv = C.addressof(self._kv_view)
        self.struct.block_stride = block
        self.struct.kv_stride = num_blocks * block
        self.struct.block_size = block_size
        self.num_blocks = num_blocks

    def trim_kv(self, blocks: list[int]) -> None:
        """Return the pages of `blocks` to the system (MADV_DONTNEED: they read as zeros
        and are backed again when a sequence writes them)."""
        if self._kv is None or not blocks:
            return
        size, region = self.struct.block_stride * 2, self.struct.kv_stride * 2
        runs: list[list[int]] = []                     # neighbouring blocks: one call per layer half
        for b in sorted(set(blocks)):
            if runs and runs[-1][1] == b:
                runs[-1][1] = b + 1
            else:
                runs.append([b, b + 1])
        for first, end in runs:
            for half in range(2 * self.args.layers):
                self._kv.madvise(mmap.MADV_DONTNEED, half * region + first * size, (end - first) * size)

    # -- forward -------------------------------------------------------------------
    def forward(self, tokens: np.ndarray, pos: np.ndarray, tab_off: np.ndarray, tables: np.ndarray,
                out_rows: np.ndarray) -> torch.Tensor:
        """int32 arrays in; fp32 logits [len(out_rows), vocab] out."""
        if self._kv is None:
            raise RuntimeError("allocate_kv first")
        logits = torch.empty((len(out_rows), self.struct.vocab), dtype=torch.float32)
        i32 = C.c_int32
        rc = self.lib.tf_forward(C.byref(self.struct), lib.ptr(tokens, i32), len(tokens), lib.ptr(pos, i32),
                                 lib.ptr(tab_off, i32), lib.ptr(tables, i32), lib.ptr(out_rows, i32),
                                 len(out_rows), lib.ptr(logits))
        if rc == -2:
            raise RanksFailed("a rank did not take part in a gather")
        if rc != 0:
            raise MemoryError("the forward could not allocate its buffers")
        return logits

    def set_gather(self, gather: lib.GATHER) -> None:
        """The all-gather a split forward calls (kept alive here)."""
        self._gather = gather
        self.struct.gather = gather


class RanksFailed(RuntimeError):
    """A gather between ranks failed: the ranks are out of step."""


def _take_shard(w: dict, a: ModelArgs, shard: Shard) -> None:
    """Keep this rank's rows of every split weight (shard.py), in place."""
    group_rows = a.heads // a.kv_heads * a.head_dim
    (k0, k1), (h0, h1), (f0, f1), (v0, v1) = (shard.own(n) for n in ("kv", "hidden", "ffn", "vocab"))
    rows = {"q": (k0 * group_rows, k1 * group_rows), "k": (k0 * a.head_dim, k1 * a.head_dim),
            "v": (k0 * a.head_dim, k1 * a.head_dim), "o": (h0, h1), "down": (h0, h1), "gate": (f0, f1),
            "up": (f0, f1)}
    for i in range(a.layers):
        for field, part in _PARTS.items():
            name = f"model.layers.{i}.{part}"
            r0, r1 = rows[field]
            if isinstance(w.get(name + ".weight"), quant.Packed):     # a missing one is refused later
                w[name + ".weight"] = take_rows(w[name + ".weight"], r0, r1)
            if name + ".bias" in w:
                w[name + ".bias"] = take_bias(w[name + ".bias"], r0, r1)
    if isinstance(w[_HEAD], quant.Packed):
        w[_HEAD] = take_rows(w[_HEAD], v0, v1)
