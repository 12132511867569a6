"""The vocabulary-sharded draw (engine/shard_draw.py): ranks that share only their maxima,
their best candidates and their totals draw the token one rank draws from the whole row,
and say when a row needs whole shards."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfold.engine import shard_draw as S
from tensorfold.engine.sampler import sample
from tensorfold.engine.types import SamplingParams

def sharded(logits: np.ndarray, params: SamplingParams, position: int, cuts: list[int],
            limit: int) -> tuple[int, str]:
    """The draw as the ranks make it; and which way: argmax, candidates or whole."""
    bounds = [0, *cuts, logits.size]
    shards = [(a, logits[a:b]) for a, b in zip(bounds, bounds[1:])]
    if params.temperature == 0.0:
        return S.global_argmax([S.local_argmax(s, a) for a, s in shards]), "argmax"
    z_max = max(S.local_max(s, params.temperature) for _, s in shards)
    picks = [S.pick(s, a, params, z_max, limit) for a, s in shards]
    if S.needs_whole(picks, params):
        return sample(logits, params, position), "whole"
    return S.merge_draw(picks, params, position), "candidates"


@settings(max_examples=400, deadline=None)
@given(
    vocab=st.integers(2, 3000),
    cut_fracs=st.lists(st.floats(0.01, 0.99), min_size=1, max_size=3),
    scale=st.floats(0.05, 30.0),
    temperature=st.sampled_from([0.0, 0.05, 0.7, 1.0, 3.0]),
    top_k=st.sampled_from([0, 1, 5, 50, 400]),
    top_p=st.sampled_from([1.0, 0.999, 0.95, 0.5, 0.1]),
    min_p=st.sampled_from([0.0, 0.001, 0.05, 0.5]),
    limit=st.sampled_from([8, 64, 1024]),
    seed=st.integers(0, 2**40),
    position=st.integers(0, 10_000),
    data_seed=st.integers(0, 2**31),
    shape=st.sampled_from(["normal", "ties", "peaks"]),
)
def test_ranks_draw_the_token_of_one(vocab, cut_fracs, scale, temperature, top_k, top_p, min_p, limit, seed,
                                     position, data_seed, shape):
    gen = np.random.default_rng(data_seed)
    logits = (gen.standard_normal(vocab) * scale).astype(np.float32)
    if shape == "ties":           # many equal logits: equal masses across the shard boundaries
        logits = np.round(logits)
    if shape == "peaks":          # a few likely tokens over a broad floor that holds real mass
        logits = (gen.standard_normal(vocab) * 0.3).astype(np.float32)
        logits[gen.integers(0, vocab, 5)] += np.float32(scale)
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
    cuts = sorted({max(1, min(vocab - 1, int(vocab * f))) for f in cut_fracs})
    token, _ = sharded(logits, params, position, cuts, limit)
    assert token == sample(logits, params, position)


def test_each_way_is_taken_and_agrees():
    """Rows whose nucleus ends inside the candidates, runs past them, or keeps everything."""
    gen = np.random.default_rng(1)
    peaked = (gen.standard_normal(50_000) * 8).astype(np.float32)      # the nucleus is a few tokens
    flat = (gen.standard_normal(50_000) * 0.1).astype(np.float32)      # the nucleus is most of the vocabulary
    floor = (gen.standard_normal(50_000) * 0.01).astype(np.float32)    # five peaks hold ~70 %; the floor ~30 %
    floor[[3, 9_000, 30_000, 30_001, 49_999]] += 10.0
    ways = set()
    for logits, params, want in [
        (floor, SamplingParams(temperature=1.0, top_p=0.6, seed=6), "candidates"),   # the total counts
        (peaked, SamplingParams(temperature=1.0, top_p=0.9, seed=1), "candidates"),
        (flat, SamplingParams(temperature=1.0, top_p=0.9, seed=2), "whole"),
        (flat, SamplingParams(temperature=1.0, top_k=40, seed=3), "candidates"),
        (flat, SamplingParams(temperature=1.0, top_k=2000, seed=3), "whole"),
        (flat, SamplingParams(temperature=1.0, seed=4), "whole"),                  # top_p 1, no min_p
        (peaked, SamplingParams(temperature=1.0, min_p=0.05, seed=5), "candidates"),
        (flat, SamplingParams(temperature=1.0, min_p=0.5, seed=5), "whole"),       # min_p keeps > 1024
        (flat, SamplingParams(temperature=0.0), "argmax"),
    ]:
        for position in range(20):
            token, way = sharded(logits, params, position, [24_576], S.CANDIDATES)
            assert way == want, (params, way)
            assert token == sample(logits, params, position)
            ways.add(way)
    assert ways == {"candidates", "whole", "argmax"}
