"""Rope's frequencies and tables come from the C library's scalar pow, cos and sin, so a
model's tables have the same bits on every instruction set numpy might vectorise with."""

from __future__ import annotations

import math

import numpy as np

from tensorfold.backends.model_args import ModelArgs, inverse_frequencies, rope_tables


def _args(theta: float, head_dim: int, scaling: dict | None = None) -> ModelArgs:
    return ModelArgs(hidden_size=head_dim * 4, intermediate_size=64, layers=1, heads=4, kv_heads=4,
                     head_dim=head_dim, vocab_size=10, rms_norm_eps=1e-6, rope_theta=theta, max_positions=64,
                     tie_word_embeddings=False, qkv_bias=False, rope_scaling=scaling)


def test_tables_are_the_c_librarys_values():
    for theta, head_dim, positions in ((10000.0, 64, 2048), (1e6, 128, 4096), (500000.0, 128, 1024)):
        inv = inverse_frequencies(_args(theta, head_dim))
        assert inv.tolist() == [1.0 / math.pow(theta, i / head_dim) for i in range(0, head_dim, 2)]
        cos, sin = rope_tables(inv, positions)
        assert cos.shape == sin.shape == (positions, head_dim) and cos.dtype == np.float32
        for p in range(0, positions, 7):
            angles = [p * f for f in inv.tolist()] * 2
            assert cos[p].tolist() == [float(np.float32(math.cos(a))) for a in angles], (theta, p)
            assert sin[p].tolist() == [float(np.float32(math.sin(a))) for a in angles], (theta, p)


def test_llama3_scaling_keeps_high_frequencies_and_divides_low_ones():
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    plain, scaled = inverse_frequencies(_args(500000.0, 128)), inverse_frequencies(_args(500000.0, 128, scaling))
    wavelen = 2 * math.pi / plain
    assert np.array_equal(scaled[wavelen < 8192 / 4], plain[wavelen < 8192 / 4])
    assert np.array_equal(scaled[wavelen > 8192], plain[wavelen > 8192] / 8.0)
    mid = (wavelen >= 8192 / 4) & (wavelen <= 8192)
    assert mid.any() and np.all((scaled[mid] < plain[mid]) & (scaled[mid] > plain[mid] / 8.0))
