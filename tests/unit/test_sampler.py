"""The keyed sampling rule: cuts against hand-computed references, shard invariance."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tensorfold.engine.sampler import (
    ONE,
    apply_cuts,
    derive_seed,
    draw,
    exact_exp64,
    keyed_uniform,
    sample,
    token_masses,
)
from tensorfold.engine.types import SamplingParams

torch.set_num_threads(1)


def logits_for(probs: list[float]) -> np.ndarray:
    """fp32 logits whose softmax is `probs` (up to float rounding)."""
    return np.array([math.log(p) for p in probs], dtype=np.float32)


def survivors(probs: list[float], **kw) -> list[int]:
    params = SamplingParams(temperature=1.0, **kw)
    mass = token_masses(logits_for(probs), 1.0)
    ids, _ = apply_cuts(np.arange(len(probs)), mass, params)
    return ids.tolist()


def test_tiny_top_p_keeps_the_likeliest_token():
    # top_p * 2^FIXED_BITS rounds to 0: the cut still keeps the top token (it was "no token")
    for top_p in (9e-13, 1e-30, 5e-324):
        assert survivors([0.2, 0.5, 0.3], top_p=top_p) == [1]


def test_greedy_is_argmax_with_lowest_id_on_ties():
    logits = np.array([0.5, 2.0, 1.0, 2.0], dtype=np.float32)
    assert sample(logits, SamplingParams(temperature=0.0), 0) == 1


def test_likeliest_token_has_mass_one():
    mass = token_masses(np.array([1.0, 3.0, -2.0], dtype=np.float32), 0.7)
    assert int(mass[1]) == ONE
    assert int(mass[0]) == round(math.exp((1.0 - 3.0) / 0.7) * ONE)


@pytest.mark.parametrize(
    "probs, kw, expected",
    [
        # top-k keeps the k likeliest
        ([0.1, 0.4, 0.2, 0.3], {"top_k": 2}, [1, 3]),
        ([0.1, 0.4, 0.2, 0.3], {"top_k": 0}, [0, 1, 2, 3]),
        ([0.1, 0.4, 0.2, 0.3], {"top_k": -1}, [0, 1, 2, 3]),
        # top-p keeps the smallest likeliest prefix reaching p: 0.4 < 0.5 so 0.3 joins
        ([0.1, 0.4, 0.2, 0.3], {"top_p": 0.5}, [1, 3]),
        ([0.1, 0.4, 0.2, 0.3], {"top_p": 0.39}, [1]),
        ([0.1, 0.4, 0.2, 0.3], {"top_p": 0.71}, [1, 2, 3]),
        # top-p after top-k: p of the kept total (0.4 + 0.3), 0.4/0.7 < 0.6
        ([0.1, 0.4, 0.2, 0.3], {"top_k": 2, "top_p": 0.6}, [1, 3]),
        ([0.1, 0.4, 0.2, 0.3], {"top_k": 2, "top_p": 0.55}, [1]),
        # min-p against the likeliest: 0.4 * 0.49 < 0.2 keeps 0.2 and 0.3
        ([0.1, 0.4, 0.2, 0.3], {"min_p": 0.49}, [1, 2, 3]),
        ([0.1, 0.4, 0.2, 0.3], {"min_p": 0.6}, [1, 3]),
        # min-p applies after top-p, and the top-p cut is taken without it
        ([0.1, 0.4, 0.2, 0.3], {"top_p": 0.71, "min_p": 0.6}, [1, 3]),
        # ties are ranked by lower id first
        ([0.25, 0.25, 0.25, 0.25], {"top_k": 2}, [0, 1]),
    ],
)
def test_cuts_match_hand_reference(probs, kw, expected):
    assert survivors(probs, **kw) == expected


def test_draw_follows_cumulative_mass_in_id_order():
    ids = np.array([3, 7, 9])
    mass = np.array([ONE // 4, ONE // 2, ONE // 4])          # cumulative 1/4, 3/4, 1
    assert draw(ids, mass, 0) == 3
    assert draw(ids, mass, ONE // 4 - 1) == 3
    assert draw(ids, mass, ONE // 4) == 7
    assert draw(ids, mass, 3 * ONE // 4) == 9
    assert draw(ids, mass, ONE - 1) == 9


def test_keyed_uniform_and_seed_are_deterministic():
    assert keyed_uniform(7, 3) == keyed_uniform(7, 3)
    assert keyed_uniform(7, 3) != keyed_uniform(7, 4)
    assert all(0 <= keyed_uniform(s, i) < ONE for s in range(5) for i in range(50))
    assert derive_seed([1, 2, 3]) == derive_seed([1, 2, 3]) != derive_seed([1, 2, 4])


def test_fixed_seed_draws_the_same_sequence():
    rows = (np.random.default_rng(0).standard_normal((32, 500)) * 3).astype(np.float32)
    params = SamplingParams(temperature=0.9, top_p=0.95, top_k=40, min_p=0.02, seed=1234)
    first = [sample(r, params, i) for i, r in enumerate(rows)]
    assert first == [sample(r, params, i) for i, r in enumerate(rows)]
    other = [sample(r, SamplingParams(temperature=0.9, top_p=0.95, top_k=40, min_p=0.02, seed=99), i)
             for i, r in enumerate(rows)]
    assert first != other


def test_draw_frequencies_follow_the_distribution():
    probs = [0.5, 0.3, 0.2]
    logits = logits_for(probs)
    params = SamplingParams(temperature=1.0, seed=5)
    counts = [0, 0, 0]
    for i in range(3000):
        counts[sample(logits, params, i)] += 1
    for c, p in zip(counts, probs):
        assert abs(c / 3000 - p) < 0.04


def test_exact_exp_is_accurate():
    d = -np.linspace(0, 60, 10001)
    rel = np.abs((exact_exp64(d) - np.exp(d)) / np.exp(d)).max()
    assert rel < 1e-14


def _isas() -> list[int]:
    """The native kernels' paths on this CPU: the scalar reference and each SIMD one."""
    from tensorfold.native import lib
    L = lib.load()
    try:
        return [i for i in range(5) if L.tf_set_isa(i) == i]
    finally:
        L.tf_set_isa(L.tf_best_isa())


def _logit_rows() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    rows = [torch.randn(n, generator=g) * s for n, s in ((49152, 3.0), (1003, 0.05), (257, 40.0), (17, 1.0))]
    masked = torch.randn(999, generator=g)
    masked[::5] = float("-inf")                       # what grammar masks leave
    ties = torch.tensor([2.5, -1.0, 2.5, 0.0] * 9)    # equal logits: equal masses
    wide = torch.linspace(-200.0, 0.0, 4000)          # down past the clamp at e^-64
    nan = torch.randn(33, generator=g)
    nan[3] = float("nan")
    return [*rows, masked, ties, wide, nan, torch.full((5,), float("-inf"))]


@pytest.mark.parametrize("isa", _isas())
def test_native_masses_have_the_reference_bits(isa):
    """The native kernel (tf_sample.c) against the numpy reference, element for element, on
    every instruction-set path, for fp32, fp16 and bf16 rows (torch tensors, widened exactly)
    and passed global maxima."""
    from tensorfold.engine.sampler import largest_z, reference_masses
    from tensorfold.native import lib
    L = lib.load()
    L.tf_set_isa(isa)
    try:
        for row in _logit_rows():
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                r = row.to(dtype)
                for t in (0.01, 0.3, 0.7, 1.0, 1.7, 100.0):
                    z_max = float((r.to(torch.float64) / t).max())
                    if not math.isnan(z_max):
                        assert largest_z(r, t) == z_max
                    for zm in (z_max, z_max + 3.0):              # a shard's: the global maximum
                        want = reference_masses(r, t, zm)
                        assert np.array_equal(token_masses(r, t, zm), want), (isa, dtype, t, r.numel())
    finally:
        L.tf_set_isa(L.tf_best_isa())


def _plain_nucleus(ids, mass, params, total=None):
    """top-k then top-p by ranking every token (the rule as the module docstring states it)."""
    keep = mass > 0
    ids, mass = ids[keep], mass[keep]
    if params.top_k > 0 or params.top_p < 1.0:
        order = np.argsort(-mass, kind="stable")
        if params.top_k > 0:
            order = order[: params.top_k]
        if params.top_p < 1.0:
            ranked = mass[order]
            total = int(ranked.sum()) if total is None else total
            threshold = max(1, -((-round(params.top_p * ONE) * total) >> 40))
            order = order[np.cumsum(ranked) - ranked < threshold]
        order = np.sort(order)
        ids, mass = ids[order], mass[order]
    return ids, mass


def test_nucleus_keeps_what_ranking_every_token_keeps():
    """The pruned nucleus (only masses every kept token reaches are ranked) against ranking the
    whole vocabulary: masses with many ties, zeros, flat and peaked rows, totals as a shard
    passes them."""
    from tensorfold.engine.sampler import nucleus
    g = np.random.default_rng(3)
    cases = []
    for n in (1, 7, 300, 5000, 49152):
        cases.append(g.integers(0, 5, n) * (ONE // 4))                                       # few values, ties
        cases.append(token_masses((g.standard_normal(n) * 4).astype(np.float32), 1.0))       # peaked
        cases.append(token_masses((g.standard_normal(n) * 0.01).astype(np.float32), 1.0))    # flat
    for mass in cases:
        ids = np.arange(mass.size, dtype=np.int64) * 3 + 11
        for top_k in (0, 1, 2, 40, 300, 1000, 10**6):
            for top_p in (1.0, 0.999, 0.9, 0.5, 0.1, 1e-9):
                params = SamplingParams(temperature=1.0, top_k=top_k, top_p=top_p)
                totals = [None] if top_k > 0 or top_p >= 1.0 else [None, int(mass.sum()) * 2]
                for total in totals:
                    got = nucleus(ids, mass, params, total=total)
                    want = _plain_nucleus(ids, mass, params, total=total)
                    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), \
                        (mass.size, top_k, top_p, total)


def test_a_draw_over_the_whole_vocabulary_equals_the_draw_over_its_positive_masses():
    """sample() with no cut draws from every mass, zeros included; the running sum rises only at
    a positive mass, so the draw is the one over the positive masses alone."""
    g = np.random.default_rng(11)
    for n, scale in ((50, 30.0), (3000, 8.0), (49152, 2.0)):
        logits = (g.standard_normal(n) * scale).astype(np.float32)
        logits[::3] = -np.inf
        mass = token_masses(logits, 0.8)
        ids = np.arange(n, dtype=np.int64)[mass > 0]
        params = SamplingParams(temperature=0.8, seed=21)
        for position in range(40):
            u = keyed_uniform(21, position)
            assert sample(logits, params, position) == draw(ids, mass[mass > 0], u)


def test_no_allowed_token_is_an_error_with_and_without_cuts():
    masked = np.full(9, -np.inf, dtype=np.float32)
    for kw in ({}, {"top_p": 0.9}, {"top_k": 3}, {"min_p": 0.1}):
        with pytest.raises(ValueError, match="no token is allowed"):
            sample(masked, SamplingParams(temperature=0.7, **kw), 0)
    with pytest.raises(ValueError, match="no token is allowed"):
        sample(masked, SamplingParams(temperature=0.0), 0)
