"""The keyed sampling rule.

A reply is a function of (prompt, seed, sampling settings) only, so the draw
for reply position i uses a uniform u_i = PRF(seed, i) with 40 bits, and the
distribution it is drawn from is made of integers:

1. temperature 0: argmax of the fp32 logits, lowest id on ties.
2. z = logits / temperature (float64); each token's weight
   w = exp(z - max z) in (0, 1], computed with IEEE basic operations only
   (one rounding each), so a token's weight has the same bits however the
   vocabulary is laid out, split or vectorised.
3. mass = round(w * 2^40): integer masses; the likeliest token has 2^40.
4. Rank tokens by (mass desc, id asc).  top_k (<= 0 off) keeps the first k;
   top_p (1 off) then keeps the ranked prefix whose mass before each token
   is below top_p of the kept total; min_p (0 off) then keeps the tokens
   with mass >= min_p * 2^40 (min_p times the likeliest).  The top-p cut is
   taken without min_p, as SGLang does.
5. Draw: with S the surviving total, target = floor(u * S / 2^40); the token
   is the first, in id order, whose inclusive cumulative mass exceeds it.

Every sum and cut is exact integer arithmetic, independent of summation order
and of how the vocabulary is split across shards.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import torch

from .types import SamplingParams

FIXED_BITS = 40
ONE = 1 << FIXED_BITS

_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453
# exp(g) on [0, ln 2) by its Taylor series: 1/k! for k = 0..17 (error < 1e-18).
_EXP_COEFFS = [1.0 / math.factorial(k) for k in range(18)]
# Weights below e^-64 round to mass 0; clamping keeps -inf (masked) finite.
_MIN_EXPONENT = -64.0


def derive_seed(prompt: Sequence[int]) -> int:
    """The seed of a request that sends none: a hash of its prompt tokens."""
    h = hashlib.sha256(b"tensorfold-seed")
    h.update(b"".join(int(t).to_bytes(4, "little") for t in prompt))
    return int.from_bytes(h.digest()[:8], "little") >> 1


def keyed_uniform(seed: int, position: int) -> int:
    """u_i = PRF(seed, i): a 40-bit integer, uniform in [0, 2^40)."""
    msg = b"tensorfold-u" + int(seed).to_bytes(16, "little", signed=True) + position.to_bytes(8, "little")
    return int.from_bytes(hashlib.sha256(msg).digest()[:5], "little")


def exact_exp64(d: torch.Tensor) -> torch.Tensor:
    """exp(d) for float64 d <= 0 from basic IEEE operations only.

    Library exp kernels take different code paths (vector body, scalar tail)
    for different elements of one tensor; a chain of single multiplies and
    adds rounds the same way for every element, wherever it sits.
    """
    t = torch.clamp(d, min=_MIN_EXPONENT) * _LOG2E
    n = torch.floor(t)
    g = (t - n) * _LN2                      # in [0, ln 2)
    p = torch.full_like(g, _EXP_COEFFS[-1])
    for c in reversed(_EXP_COEFFS[:-1]):
        p = p * g
        p = p + c
    return torch.ldexp(p, n.to(torch.int64))


def token_masses(logits: torch.Tensor, temperature: float, z_max: float | None = None) -> torch.Tensor:
    """Integer masses (int64, [vocab]) of one row of fp32 logits.

    `z_max` is the largest logit/temperature over the whole vocabulary; a
    shard holding part of the vocabulary passes the global one.
    """
    z = logits.to(torch.float64) / float(temperature)
    if z_max is None:
        z_max = float(z.max())
    return torch.round(exact_exp64(z - z_max) * float(ONE)).to(torch.int64)


def apply_cuts(ids: torch.Tensor, mass: torch.Tensor, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """top-k, then top-p, then min-p on candidates (ids ascending, int64 masses).

    Returns the surviving (ids, masses), still in ascending id order.
    """
    return cut_min_p(*nucleus(ids, mass, params), params)


def nucleus(ids: torch.Tensor, mass: torch.Tensor, params: SamplingParams,
            total: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens with mass that top-k and then top-p keep, in ascending id order.  `total`:
    the kept total when the candidates are part of a vocabulary split across ranks
    (shard_draw.py; top-k off); else their own sum."""
    keep = mass > 0
    ids, mass = ids[keep], mass[keep]
    if params.top_k > 0 or params.top_p < 1.0:
        order = torch.sort(mass, descending=True, stable=True).indices  # ties: lower id first
        if params.top_k > 0:
            order = order[: params.top_k]
        if params.top_p < 1.0:
            ranked = mass[order]
            total = int(ranked.sum()) if total is None else total
            # keep while the mass before a token is below top_p * total (exact); the
            # likeliest token always stays, however small top_p is
            threshold = max(1, -((-round(params.top_p * ONE) * total) >> FIXED_BITS))  # ceil
            before = torch.cumsum(ranked, 0) - ranked
            order = order[before < threshold]
        order = torch.sort(order).values
        ids, mass = ids[order], mass[order]
    return ids, mass


def cut_min_p(ids: torch.Tensor, mass: torch.Tensor, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the tokens with mass >= min_p * 2^40 (min_p times the likeliest)."""
    if params.min_p > 0.0:
        keep = mass >= math.ceil(params.min_p * ONE)
        ids, mass = ids[keep], mass[keep]
    return ids, mass


def draw(ids: torch.Tensor, mass: torch.Tensor, u: int) -> int:
    """The token whose cumulative mass (ascending ids) first exceeds u * S / 2^40."""
    cum = torch.cumsum(mass, 0)
    target = (u * int(cum[-1])) >> FIXED_BITS
    idx = int(torch.searchsorted(cum, target, right=True))
    return int(ids[idx])


def sample(logits: torch.Tensor, params: SamplingParams, position: int) -> int:
    """The keyed draw for reply position `position` from one fp32 row [vocab]."""
    if params.temperature == 0.0:
        if bool(torch.isneginf(logits).all()):
            raise ValueError(f"no token is allowed at reply position {position}")
        return int(torch.argmax(logits))    # first maximum: lowest id on ties
    mass = token_masses(logits, params.temperature)
    ids = torch.arange(mass.numel(), dtype=torch.int64)
    ids, mass = apply_cuts(ids, mass, params)
    if ids.numel() == 0:
        raise ValueError(f"no token is allowed at reply position {position}")
    return draw(ids, mass, keyed_uniform(params.seed, position))
