"""The Llama family: Llama 2/3, SmolLM2, Qwen2/2.5 (q/k/v biases)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ...model_args import ModelArgs, inverse_frequencies
from ..kernels import apply_rope, linear, paged_attention, rms_norm, rope_tables, silu_mul
from ..kv import KVPool, Segment

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: list[Segment], kv: KVPool,
           layer: int) -> torch.Tensor:
    """Write each segment's keys and values into KV layer `layer` ([blocks, kv, B, hd]) and
    attend its queries over its blocks; [rows, heads * hd]."""
    k_pool, v_pool = kv.k[layer], kv.v[layer]
    outs, row = [], 0
    for seg in segments:
        blocks, offsets = seg.slots(kv.block_size)
        rows = slice(row, row + seg.rows)
        k_pool[blocks, :, offsets] = k[:, rows].transpose(0, 1)
        v_pool[blocks, :, offsets] = v[:, rows].transpose(0, 1)
        outs.append(paged_attention(q[:, rows], k_pool, v_pool, seg.table, seg.start))
        row += seg.rows
    return torch.cat(outs) if len(outs) > 1 else outs[0]


class Layer:
    def __init__(self, w: dict[str, torch.Tensor], prefix: str, args: ModelArgs) -> None:
        a = prefix + "self_attn."
        self.q, self.k, self.v, self.o = (w[a + n + "_proj.weight"] for n in "qkvo")
        self.q_bias, self.k_bias, self.v_bias = (w.get(a + n + "_proj.bias") for n in "qkv")
        m = prefix + "mlp."
        self.gate, self.up, self.down = (w[m + n + "_proj.weight"] for n in ("gate", "up", "down"))
        self.attn_norm = w[prefix + "input_layernorm.weight"]
        self.mlp_norm = w[prefix + "post_attention_layernorm.weight"]
        self.args = args

    def project_qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = self.args
        q = linear(h, self.q, self.q_bias).view(-1, a.heads, a.head_dim).transpose(0, 1)
        k = linear(h, self.k, self.k_bias).view(-1, a.kv_heads, a.head_dim).transpose(0, 1)
        v = linear(h, self.v, self.v_bias).view(-1, a.kv_heads, a.head_dim).transpose(0, 1)
        return q, k, v

    def forward(self, x: torch.Tensor, layer: int, segments: list[Segment], kv: KVPool,
                cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        a = self.args
        h = rms_norm(x, self.attn_norm, a.rms_norm_eps)                    # [rows, hidden]
        q, k, v = self.project_qkv(h)                                      # [heads, rows, hd]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        x = x + linear(attend(q, k, v, segments, kv, layer), self.o)
        h = rms_norm(x, self.mlp_norm, a.rms_norm_eps)
        return x + linear(silu_mul(linear(h, self.gate), linear(h, self.up)), self.down)


class Model:
    """Weights as plain tensors; `forward` runs one batch of segments."""

    layer_class = Layer

    def __init__(self, args: ModelArgs, weights: Iterable[tuple[str, torch.Tensor]],
                 dtype: torch.dtype, device: torch.device) -> None:
        w = {name: t.to(device=device, dtype=dtype) for name, t in weights}
        self.args, self.dtype, self.device = args, dtype, device
        self.embed = w["model.embed_tokens.weight"]
        self.norm = w["model.norm.weight"]
        self.lm_head = self.embed if args.tie_word_embeddings or "lm_head.weight" not in w else w["lm_head.weight"]
        self.layers = [self.layer_class(w, f"model.layers.{i}.", args) for i in range(args.layers)]
        self.cos, self.sin = (t.to(device) for t in rope_tables(inverse_frequencies(args), args.max_positions))

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, segments: list[Segment], kv: KVPool,
                out_rows: torch.Tensor) -> torch.Tensor:
        """tokens [rows] over `segments` in order -> fp32 logits [len(out_rows), vocab]."""
        positions = torch.cat([torch.arange(s.start, s.start + s.rows) for s in segments]).to(self.device)
        cos, sin = self.cos[positions], self.sin[positions]
        x = self.embed[tokens]
        for i, layer in enumerate(self.layers):
            x = layer.forward(x, i, segments, kv, cos, sin)
        h = rms_norm(x[out_rows], self.norm, self.args.rms_norm_eps)
        return linear(h, self.lm_head).to(torch.float32)
