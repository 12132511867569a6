"""The keyed draw over a vocabulary split across ranks, as SPEC.md has it: each
rank reads its 1,024 best candidates, and its whole shard when a row's nucleus
runs past them (or with top_p 1 and no min_p).

Rank r holds the logits of ids [offset_r, offset_r + n_r).  The ranks first
exchange their largest logit/temperature, so every rank computes each token's
integer mass exactly as one rank would (sampler.token_masses with the global
maximum).  Each then sends a Pick: its CANDIDATES best tokens by (mass desc,
id asc) with their masses and its shard's total mass, or says the row needs
whole shards where the cuts may keep tokens past its candidates (top_k above
them; top_p 1 with no min_p, or min_p keeping more than them).  Rank 0 merges
the picks: the top-k set of the whole vocabulary lies in the candidates;
with top_k off the nucleus takes the ranks' summed total, and is the one of
the whole vocabulary unless it reaches some rank's last candidate (then that
row is drawn from whole shards).  The draw is sampler.draw on the survivors,
so the token is the one sampler.sample draws from the whole row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .sampler import ONE, cut_min_p, draw, greedy, keyed_uniform, largest_z, nucleus, token_masses
from .types import SamplingParams

CANDIDATES = 1024


@dataclass(frozen=True)
class Pick:
    ids: np.ndarray          # int64 global ids, ascending
    mass: np.ndarray         # their int64 masses (> 0)
    total: int               # every mass of the shard, summed
    whole: bool              # the row needs whole shards (the cuts may keep more than ids)
    partial: bool            # ids are this shard's best, not every token with mass


def local_max(logits: np.ndarray, temperature: float) -> float:
    """This shard's largest logit / temperature (float64), or its largest logit at temperature 0."""
    if temperature == 0.0:
        return greedy(logits)[0]
    return largest_z(logits, temperature)


def local_argmax(logits: np.ndarray, offset: int) -> tuple[float, int]:
    """(largest logit, its lowest global id)."""
    top, i = greedy(logits)
    return top, offset + i


def global_argmax(locals_: list[tuple[float, int]]) -> int:
    """The ranks' (value, id) in rank order (ascending ids) -> the whole row's argmax, lowest id on ties."""
    best = max(v for v, _ in locals_)
    return next(i for v, i in locals_ if v == best)


def pick(logits: np.ndarray, offset: int, params: SamplingParams, z_max: float,
         limit: int = CANDIDATES) -> Pick:
    """What one rank sends for a row at temperature > 0 (`z_max`: the global maximum)."""
    mass = token_masses(logits, params.temperature, z_max)
    total = int(mass.sum())
    ids = np.arange(offset, offset + mass.size, dtype=np.int64)
    live = mass > 0
    ids, mass = ids[live], mass[live]
    if mass.size <= limit:
        return Pick(ids, mass, total, whole=False, partial=False)
    everything = params.top_k <= 0 and params.top_p >= 1.0
    if params.top_k > limit or (everything and params.min_p == 0.0) or (
            everything and int((mass >= math.ceil(params.min_p * ONE)).sum()) > limit):
        return Pick(ids[:0], mass[:0], total, whole=True, partial=True)
    best = np.sort(np.argsort(-mass, kind="stable")[:limit])      # ties: lower id
    return Pick(ids[best], mass[best], total, whole=False, partial=True)


def needs_whole(picks: list[Pick], params: SamplingParams) -> bool:
    """Whether the row must be drawn from whole shards (the same answer on every rank)."""
    if any(p.whole for p in picks):
        return True
    if params.top_k > 0 or params.top_p >= 1.0 or not any(p.partial for p in picks):
        return False
    ids, mass = _union(picks)
    kept, _ = nucleus(ids, mass, params, total=sum(p.total for p in picks))
    lasts = [_last(p) for p in picks if p.partial]
    return bool(np.isin(np.array(lasts, dtype=np.int64), kept).any())


def merge_draw(picks: list[Pick], params: SamplingParams, position: int) -> int:
    """The keyed draw from the ranks' picks (needs_whole(picks) False)."""
    ids, mass = _union(picks)
    total = sum(p.total for p in picks) if params.top_k <= 0 else None
    ids, mass = cut_min_p(*nucleus(ids, mass, params, total=total), params)
    token = draw(ids, mass, keyed_uniform(params.seed, position))
    if token is None:
        raise ValueError(f"no token is allowed at reply position {position}")
    return token


def _union(picks: list[Pick]) -> tuple[np.ndarray, np.ndarray]:
    """Every rank's candidates in ascending id order (ranks hold ascending id ranges)."""
    return np.concatenate([p.ids for p in picks]), np.concatenate([p.mass for p in picks])


def _last(p: Pick) -> int:
    """A partial pick's lowest-ranked candidate (least mass; the highest id among equals)."""
    least = p.mass.min()
    return int(p.ids[p.mass == least].max())
