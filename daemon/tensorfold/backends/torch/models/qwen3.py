"""Qwen3 dense: the Llama layout plus RMSNorm on each head's queries and keys."""

from __future__ import annotations

import torch

from ..kernels import rms_norm
from . import llama

ARCHITECTURES = ("Qwen3ForCausalLM",)
ModelArgs = llama.ModelArgs


class Layer(llama.Layer):
    def __init__(self, w: dict[str, torch.Tensor], prefix: str, args: llama.ModelArgs) -> None:
        super().__init__(w, prefix, args)
        self.q_norm = w[prefix + "self_attn.q_norm.weight"]
        self.k_norm = w[prefix + "self_attn.k_norm.weight"]

    def project_qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = super().project_qkv(h)
        eps = self.args.rms_norm_eps
        return rms_norm(q, self.q_norm, eps), rms_norm(k, self.k_norm, eps), v


class Model(llama.Model):
    layer_class = Layer
