"""Qwen3.5 hybrids on torch (CUDA; CPU for tests): Gated DeltaNet layers with per-sequence
state slots, and gated attention with partial rope, over the Llama layout's MLP.

The delta rule runs in its per-token form, one row of one sequence at a time with
tensors of one fixed shape, so a position's state has the same bits in a prefill
chunk of any size, a decode step, a verify row or a batch of any make-up (the
kernels see the same shapes whatever the batch).  Rows name their state slots
as on the CPU engine (engine/states.py): each reads its sequence's state before
it from `src` (-1: zeros) and leaves the state after it in its `dst` slot.
Text only: images run on the CPU engine.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from ....checkpoints.qwen35 import ARCHITECTURES as HYBRIDS
from ....checkpoints.qwen35 import DELTANET, HybridArgs, hf_weights, text_config
from ..kernels import apply_rope, exact_exp32, linear, rms_norm, rope_tables, silu_mul
from ..kv import KVPool, Segment
from . import llama

ARCHITECTURES = HYBRIDS


class ModelArgs(llama.ModelArgs):
    @classmethod
    def from_config(cls, c: dict) -> llama.ModelArgs:
        return llama.ModelArgs.from_config(text_config(c))


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    return 1.0 / (exact_exp32(-x) + 1.0)


def _silu(x: torch.Tensor) -> torch.Tensor:
    return x / (exact_exp32(-x) + 1.0)


def _softplus(x: torch.Tensor) -> torch.Tensor:
    """softplus (x past 20 is x) from correctly rounded +, -, *, / and frexp alone, as the
    CPU engine computes it (tf_deltanet.c): log(1 + u) = 2 atanh(s), s = u / (2 + u), the
    argument first brought near 1 by a power of two when u is large.  torch's own softplus
    gives an element bits that depend on where it sits in the tensor (vector body or tail)."""
    x = x.to(torch.float32)
    u = exact_exp32(torch.clamp(x, max=20.0))
    small = u <= 0.41421356
    y, e = torch.frexp(1.0 + u)
    low = y < 0.70710678
    y = torch.where(low, y * 2.0, y)
    e = torch.where(low, e - 1, e).to(torch.float32)
    s = torch.where(small, u / (2.0 + u), (y - 1.0) / (y + 1.0))
    e = torch.where(small, torch.zeros_like(e), e)
    s2 = s * s
    p = s2 * (1.0 / 11.0)
    for c in (1.0 / 9.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0):
        p = (p + c) * s2
    r = (2.0 * s) * p + 2.0 * s
    out = e * 0.693359375 + (r + e * -2.12194440e-4)
    return torch.where(x > 20.0, x, out)


class States:
    """Every slot's conv history [slots, layers, conv_k - 1, conv_dim] and delta-rule
    matrices [slots, layers, v_heads, k_dim, v_dim], fp32."""

    def __init__(self, h: HybridArgs, slots: int, device: torch.device) -> None:
        n = h.deltanet_layers
        self.conv = torch.zeros((slots, n, h.conv_k - 1, h.conv_dim), dtype=torch.float32, device=device)
        self.rule = torch.zeros((slots, n, h.v_heads, h.k_dim, h.v_dim), dtype=torch.float32, device=device)


class AttentionLayer(llama.Layer):
    """Gated attention: q_proj gives each head's queries and their output gate; q and k
    RMS-normed per head; rope on the leading rot_dim dims of each head."""

    def __init__(self, w: dict[str, torch.Tensor], prefix: str, args: llama.ModelArgs, slot: int) -> None:
        super().__init__(w, prefix, args)
        self.q_gate = w[prefix + "self_attn.q_gate.weight"]
        self.q_norm, self.k_norm = w[prefix + "self_attn.q_norm.weight"], w[prefix + "self_attn.k_norm.weight"]
        self.slot = slot

    def forward(self, x: torch.Tensor, layer: int, segments: list[Segment], kv: KVPool, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        a = self.args
        h = rms_norm(x, self.attn_norm, a.rms_norm_eps)
        q, k, v = self.project_qkv(h)
        q, k = rms_norm(q, self.q_norm, a.rms_norm_eps), rms_norm(k, self.k_norm, a.rms_norm_eps)
        rd = cos.shape[-1]
        q = torch.cat((apply_rope(q[..., :rd], cos, sin), q[..., rd:]), dim=-1)
        k = torch.cat((apply_rope(k[..., :rd], cos, sin), k[..., rd:]), dim=-1)
        att = llama.attend(q, k, v, segments, kv, self.slot)
        gate = linear(h, self.q_gate)
        x = x + linear((att.to(torch.float32) * _sigmoid(gate.to(torch.float32))).to(x.dtype), self.o)
        return self.mlp(x)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        h = rms_norm(x, self.mlp_norm, self.args.rms_norm_eps)
        return x + linear(silu_mul(linear(h, self.gate), linear(h, self.up)), self.down)


class DeltaNetLayer:
    """Gated DeltaNet: in_proj_qkv through a causal depthwise conv and SiLU; q and k of
    each key head to unit length (q then / sqrt(k_dim)); per value head
    S = S * exp(g); delta = (v - k S) * sigmoid(b); S = S + k delta; o = q S; then a gated
    RMSNorm (weight, SiLU(z)) and out_proj."""

    def __init__(self, w: dict[str, torch.Tensor], prefix: str, args: llama.ModelArgs, h: HybridArgs,
                 slot: int, model: Model) -> None:
        d = prefix + "linear_attn."
        self.args, self.h, self.slot, self.model = args, h, slot, model      # the model holds the states
        self.attn_norm, self.mlp_norm = w[prefix + "input_layernorm.weight"], w[prefix + "post_attention_layernorm.weight"]
        self.gate, self.up, self.down = (w[prefix + f"mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))
        self.in_qkv, self.in_z = w[d + "in_proj_qkv.weight"], w[d + "in_proj_z.weight"]
        self.in_b, self.in_a, self.o = w[d + "in_proj_b.weight"], w[d + "in_proj_a.weight"], w[d + "out_proj.weight"]
        self.conv = w[d + "conv1d.weight"].to(torch.float32).reshape(h.conv_dim, h.conv_k)
        self.dt_bias, self.decay_a = w[d + "dt_bias"].to(torch.float32), w[d + "decay_a"].to(torch.float32)
        self.gnorm = w[d + "norm.weight"]

    mlp = AttentionLayer.mlp

    def forward(self, x: torch.Tensor, layer: int, segments: list[Segment], kv: KVPool, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        a, hy, states = self.args, self.h, self.model.states
        h = rms_norm(x, self.attn_norm, a.rms_norm_eps)
        qkv = linear(h, self.in_qkv).to(torch.float32)
        z = linear(h, self.in_z).to(torch.float32).view(-1, hy.v_heads, hy.v_dim)
        beta = _sigmoid(linear(h, self.in_b).to(torch.float32))
        g = self.decay_a * _softplus(linear(h, self.in_a).to(torch.float32) + self.dt_bias)
        decay = exact_exp32(g)
        out, row = torch.empty((x.shape[0], hy.v_heads, hy.v_dim), dtype=torch.float32, device=x.device), 0
        for seg in segments:
            for j in range(seg.rows):
                src = seg.src if j == 0 else seg.dst[j - 1]
                out[row + j] = self._row(qkv[row + j], beta[row + j], decay[row + j], src, seg.dst[j], states)
            row += seg.rows
        normed = rms_norm(out, self.gnorm, a.rms_norm_eps) * _silu(z)
        x = x + linear(normed.reshape(x.shape[0], -1).to(x.dtype), self.o)
        return self.mlp(x)

    def _row(self, qkv: torch.Tensor, beta: torch.Tensor, decay: torch.Tensor, src: int, dst: int,
             states: States) -> torch.Tensor:
        hy = self.h
        conv, rule = states.conv[:, self.slot], states.rule[:, self.slot]
        hist = conv[src] if src >= 0 else torch.zeros_like(conv[dst])
        window = torch.cat((hist, qkv[None]))                                 # [conv_k, conv_dim]
        acc = self.conv[:, 0] * window[0]
        for t in range(1, hy.conv_k):                                          # one fixed order
            acc = acc + self.conv[:, t] * window[t]
        mixed = _silu(acc)
        conv[dst] = window[1:]
        keys = hy.k_heads * hy.k_dim
        q = mixed[:keys].view(hy.k_heads, hy.k_dim)
        k = mixed[keys:2 * keys].view(hy.k_heads, hy.k_dim)
        v = mixed[2 * keys:].view(hy.v_heads, hy.v_dim)
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) / hy.k_dim ** 0.5
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        per = hy.v_heads // hy.k_heads
        q, k = q.repeat_interleave(per, dim=0), k.repeat_interleave(per, dim=0)     # [v_heads, k_dim]
        s = (rule[src] if src >= 0 else torch.zeros_like(rule[dst])) * decay[:, None, None]
        delta = (v - (s * k[:, :, None]).sum(1)) * beta[:, None]
        s = s + k[:, :, None] * delta[:, None, :]
        rule[dst] = s
        return (s * q[:, :, None]).sum(1)


class Model(llama.Model):
    def __init__(self, args: llama.ModelArgs, weights: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype,
                 device: torch.device, hybrid: HybridArgs) -> None:
        arrays = ((name, t.to(torch.float32).numpy()) for name, t in weights)
        w = {name: torch.from_numpy(np.ascontiguousarray(arr)).to(device=device, dtype=dtype)
             for name, arr in hf_weights(arrays, args.heads, args.head_dim)}
        self.args, self.dtype, self.device, self.hybrid = args, dtype, device, hybrid
        self.embed, self.norm = w["model.embed_tokens.weight"], w["model.norm.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed)
        kinds = hybrid.kinds
        self.layers = [DeltaNetLayer(w, f"model.layers.{i}.", args, hybrid, kinds[:i].count(kind), self)
                       if kind == DELTANET else AttentionLayer(w, f"model.layers.{i}.", args, kinds[:i].count(kind))
                       for i, kind in enumerate(kinds)]
        inv = llama.inverse_frequencies(args, hybrid.rot_dim)
        self.cos, self.sin = (t.to(device) for t in rope_tables(inv, args.max_positions))
        self.states: States | None = None
