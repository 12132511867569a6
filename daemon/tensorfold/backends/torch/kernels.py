"""The few tensor operations the model files share.

Every model family computes its linears and attention through these, so the
engine's exactness rules (shape-invariant forwards) live in one place.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [rows, in] @ weight.T [in, out] (+ bias) -> [rows, out]."""
    return F.linear(x, weight, bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm computed in fp32, returned in x's dtype (as Llama/Qwen define it)."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding in the rotate-half layout.

    x [heads, rows, head_dim]; cos, sin [rows, head_dim] (fp32).
    """
    half = x.shape[-1] // 2
    xf = x.to(torch.float32)
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    """One sequence's attention for rows at positions start..start+rows-1.

    q [heads, rows, hd]; k, v [kv_heads, start+rows, hd] (the sequence's cache
    through the last row).  Returns [rows, heads * hd].
    """
    rows, keys = q.shape[1], k.shape[1]
    mask = torch.arange(keys).unsqueeze(0) <= (start + torch.arange(rows)).unsqueeze(1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return out.transpose(0, 1).reshape(rows, -1)


def rope_tables(inv_freq: torch.Tensor, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [max_positions, head_dim] in fp32 from inverse frequencies [head_dim/2]."""
    pos = torch.arange(max_positions, dtype=torch.float64)
    angles = torch.outer(pos, inv_freq.to(torch.float64))
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(torch.float32), angles.sin().to(torch.float32)
