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

import ctypes
import hashlib
import math
from collections.abc import Sequence

import numpy as np

from ..native import lib as native
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


def host_row(logits) -> np.ndarray:
    """A row of logits as contiguous fp32 in host memory: a numpy array as it is, a tensor on
    the CPU without a copy when it is fp32 (a torch tensor: anything with .numpy()), else
    converted (fp16 and bf16 widen exactly)."""
    if isinstance(logits, np.ndarray):
        return logits if logits.dtype == np.float32 and logits.flags.c_contiguous else \
            np.ascontiguousarray(logits, dtype=np.float32)
    return np.ascontiguousarray(logits.detach().float().cpu().numpy())


def exact_exp64(d: np.ndarray) -> np.ndarray:
    """exp(d) for float64 d <= 0 from basic IEEE operations only.

    Library exp kernels take different code paths (vector body, scalar tail)
    for different elements of one array; a chain of single multiplies and
    adds rounds the same way for every element, wherever it sits.
    """
    t = np.maximum(np.asarray(d, dtype=np.float64), _MIN_EXPONENT) * _LOG2E
    n = np.floor(t)
    g = (t - n) * _LN2                      # in [0, ln 2)
    p = np.full_like(g, _EXP_COEFFS[-1])
    for c in reversed(_EXP_COEFFS[:-1]):
        p = p * g
        p = p + c
    return np.ldexp(p, np.nan_to_num(n, nan=0.0).astype(np.int64))


def token_masses(logits, temperature: float, z_max: float | None = None) -> np.ndarray:
    """Integer masses (int64, [vocab]) of one row of logits.

    `z_max` is the largest logit/temperature over the whole vocabulary; a
    shard holding part of the vocabulary passes the global one.  The native
    kernel (tf_sample.c) makes the same operations in the same order as
    reference_masses, so the same bits, in one pass.
    """
    row = host_row(logits)
    if z_max is None:
        z_max = float(row.max()) / float(temperature)
    mass = np.empty(row.size, dtype=np.int64)
    native.load().tf_token_masses(native.ptr(row), row.size, float(temperature), float(z_max),
                                  native.ptr(mass, ctypes.c_int64))
    return mass


def reference_masses(logits, temperature: float, z_max: float) -> np.ndarray:
    """token_masses in numpy operations (the native kernel's reference).  A NaN logit (or
    every logit -inf) has mass 0."""
    z = host_row(logits).astype(np.float64) / float(temperature)
    with np.errstate(invalid="ignore"):
        mass = np.round(exact_exp64(z - z_max) * float(ONE))
    return np.nan_to_num(mass, nan=0.0).astype(np.int64)


def largest_z(logits, temperature: float) -> float:
    """The largest logit / temperature in float64 (dividing the largest logit rounds to the
    same value: division by a positive number and rounding keep the order)."""
    return float(host_row(logits).max()) / float(temperature)


def greedy(logits) -> tuple[float, int]:
    """(the largest logit, its lowest id)."""
    values = host_row(logits)
    i = int(values.argmax())                # the first maximum
    return float(values[i]), i


def apply_cuts(ids: np.ndarray, mass: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """top-k, then top-p, then min-p on candidates (ids ascending, int64 masses).

    Returns the surviving (ids, masses), still in ascending id order.
    """
    return cut_min_p(*nucleus(ids, mass, params), params)


def nucleus(ids: np.ndarray, mass: np.ndarray, params: SamplingParams,
            total: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The tokens with mass that top-k and then top-p keep, in ascending id order.  `total`:
    the kept total when the candidates are part of a vocabulary split across ranks
    (shard_draw.py; top-k off); else their own sum.  Only the tokens at or above a mass
    every kept token reaches (_least_kept) are ranked, which keeps the same ones."""
    if params.top_k <= 0 and params.top_p >= 1.0:
        return _positive(ids, mass)
    live = int(np.count_nonzero(mass))
    k = params.top_k if 0 < params.top_k < live else live
    if params.top_p < 1.0 and total is None:         # what top-k keeps
        total = int(mass.sum()) if k == live else int(_largest_first(mass, k).sum())
    ids, mass = _positive(ids, mass, _least_kept(mass, k, params.top_p, total))
    order = np.argsort(-mass, kind="stable")[:k]     # ties: lower id first
    if params.top_p < 1.0:
        ranked = mass[order]
        before = np.cumsum(ranked) - ranked
        order = order[before < _top_p_threshold(params.top_p, total)]
    order = np.sort(order)
    return ids[order], mass[order]


def _largest_first(mass: np.ndarray, k: int) -> np.ndarray:
    """The k largest masses (0 <= k <= mass.size), largest first.  The masses at or above a
    threshold that falls from the largest by 2^-4 a step are taken first, so the selection
    runs on a few of the vocabulary's masses."""
    if 0 < k < mass.size:
        threshold = int(mass.max())
        while threshold and np.count_nonzero(mass >= threshold) < k:
            threshold >>= 4
        if threshold:
            mass = mass[mass >= threshold]
        mass = np.partition(mass, mass.size - k)[mass.size - k:]
    return np.sort(mass[:max(k, 0)])[::-1]


def _top_p_threshold(top_p: float, total: int) -> int:
    """top-p keeps a ranked token while the mass before it is below this: top_p times the
    total, rounded up (exact); at least 1, so the likeliest token always stays, however
    small top_p is."""
    return max(1, -((-round(top_p * ONE) * total) >> FIXED_BITS))


def _least_kept(mass: np.ndarray, k: int, top_p: float, total: int | None) -> int:
    """A mass (>= 1) that every token the first k (by mass) and then top-p keep reaches: the
    largest masses in order, until their running sum reaches the top-p threshold (the token
    there is the last kept one) or k of them are taken.  Ties among equal masses do not
    matter here."""
    probe = min(k, 256)
    while True:
        top = _largest_first(mass, probe)
        if top_p < 1.0:
            reached = np.flatnonzero(np.cumsum(top) >= _top_p_threshold(top_p, total))
            if reached.size:
                return max(1, int(top[reached[0]]))
        if probe == k:
            return max(1, int(top[-1])) if probe else 1
        probe = min(k, probe * 8)


def _positive(ids: np.ndarray, mass: np.ndarray, least: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The tokens with mass >= least (>= 1), in their order."""
    at = np.flatnonzero(mass >= least)
    return ids[at], mass[at]


def cut_min_p(ids: np.ndarray, mass: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """Keep the tokens with mass >= min_p * 2^40 (min_p times the likeliest)."""
    if params.min_p > 0.0:
        keep = mass >= math.ceil(params.min_p * ONE)
        ids, mass = ids[keep], mass[keep]
    return ids, mass


def draw(ids: np.ndarray | None, mass: np.ndarray, u: int) -> int | None:
    """The token whose cumulative mass (ascending ids) first exceeds u * S / 2^40, None if S is 0;
    ids None: the masses are the whole vocabulary's (zeros included: the running sum never
    stops on one)."""
    if not mass.size:
        return None
    cum = np.cumsum(mass)
    total = int(cum[-1])
    if not total:
        return None
    idx = int(np.searchsorted(cum, (u * total) >> FIXED_BITS, side="right"))
    return idx if ids is None else int(ids[idx])


def sample(logits, params: SamplingParams, position: int) -> int:
    """The keyed draw for reply position `position` from one fp32 row [vocab]."""
    if params.temperature == 0.0:
        top, token = greedy(logits)         # first maximum: lowest id on ties
        if top == -math.inf:
            raise ValueError(f"no token is allowed at reply position {position}")
        return token
    mass = token_masses(logits, params.temperature)
    ids = None
    if params.top_k > 0 or params.top_p < 1.0 or params.min_p > 0.0:
        ids, mass = apply_cuts(np.arange(mass.size, dtype=np.int64), mass, params)
    token = draw(ids, mass, keyed_uniform(params.seed, position))
    if token is None:
        raise ValueError(f"no token is allowed at reply position {position}")
    return token
