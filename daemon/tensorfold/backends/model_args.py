"""A decoder's shape from its config.json, and rope's frequencies and tables: what every
engine reads, in numpy, so the CPU engine runs without importing torch."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class ModelArgs:
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    max_positions: int
    tie_word_embeddings: bool
    qkv_bias: bool
    rope_scaling: dict | None

    @classmethod
    def from_config(cls, c: dict) -> "ModelArgs":
        rope = c.get("rope_parameters") or {}
        scaling = c.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
        heads = c["num_attention_heads"]
        return cls(
            hidden_size=c["hidden_size"],
            intermediate_size=c["intermediate_size"],
            layers=c["num_hidden_layers"],
            heads=heads,
            kv_heads=c.get("num_key_value_heads") or heads,
            head_dim=c.get("head_dim") or c["hidden_size"] // heads,
            vocab_size=c["vocab_size"],
            rms_norm_eps=c.get("rms_norm_eps", 1e-6),
            rope_theta=c.get("rope_theta") or rope.get("rope_theta", 10000.0),
            max_positions=c.get("max_position_embeddings", 4096),
            tie_word_embeddings=c.get("tie_word_embeddings", False),
            qkv_bias=c.get("attention_bias", False) or c["architectures"][0] == "Qwen2ForCausalLM",
            rope_scaling=scaling,
        )


def inverse_frequencies(args: ModelArgs, dim: int | None = None) -> np.ndarray:
    """Rope's inverse frequencies (float64 [dim/2]) over `dim` leading dims of a head (default:
    all of them).  The powers are the C library's pow, one at a time, not a vector routine
    that may round differently on another instruction set (rope_tables: the same for cos
    and sin)."""
    dim = dim or args.head_dim
    inv = np.array([1.0 / math.pow(args.rope_theta, i / dim) for i in range(0, dim, 2)], dtype=np.float64)
    s = args.rope_scaling
    if not s or s.get("rope_type", s.get("type")) in (None, "default"):
        return inv
    if s.get("rope_type", s.get("type")) != "llama3":
        raise ValueError(f"unsupported rope scaling {s!r}")
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    smooth = (old / wavelen - low) / (high - low)
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    mid = (wavelen <= old / low) & (wavelen >= old / high)
    return np.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)


def rope_tables(inv_freq: np.ndarray, stop: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin tables (fp32 [stop - start, head_dim]) of positions start .. stop - 1 from
    inverse frequencies [head_dim/2]: float64 angles (one rounded multiply each) through
    numpy's float64 cos and sin, which give the C library's values (test_model_args.py
    checks that on the machine at hand), so a position's row is the same in any range."""
    angles = np.outer(np.arange(start, stop, dtype=np.float64), np.asarray(inv_freq, dtype=np.float64))
    angles = np.concatenate((angles, angles), axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
