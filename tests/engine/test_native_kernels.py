"""The C kernels of the CPU engine (tensorfold.native) against their contract.

tf_kernels.h fixes the arithmetic of every output element (lanes8 reductions,
the activation-quantization rule, the int8 block dot), so a result's bits may
not depend on the instruction set, the thread count, the batch it came in, the
rows beside it, how a prompt was chunked or where its KV blocks live.  The
invariance checks here compare raw bit patterns; the accuracy checks compare
with float64 numpy references or the fp32 torch model, with bounds justified
where they are set.
"""

from __future__ import annotations

import ctypes as C
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT

from tensorfold.native import lib
from tensorfold.native import quant as Q
from tensorfold.native.model import _huge_pages
from tests.unit.test_quant_pack import random_raw

torch.set_num_threads(1)

L = lib.load()
F32 = np.float32


def _available_isas() -> list[int]:
    """0 (scalar reference) and every SIMD path this CPU can run."""
    found = []
    try:
        for i in (0, 1, 2, 3):
            if L.tf_set_isa(i) == i:
                found.append(i)
    finally:
        L.tf_set_isa(L.tf_best_isa())
    return found


ISAS = _available_isas()


@pytest.fixture(autouse=True)
def restore_kernels():
    """Every test may switch the ISA, the thread count or the fp16 path: put them back."""
    threads = L.tf_pool_threads()
    try:
        yield
    finally:
        L.tf_set_isa(L.tf_best_isa())
        set_pool(threads)
        L.tf_set_soft_fp16(0)


def use_isa(i: int) -> None:
    assert L.tf_set_isa(i) == i


def set_pool(n: int) -> int:
    return L.tf_pool_set_threads(n)


def use_threads(n: int) -> None:
    assert set_pool(n) == n


def bits(a) -> np.ndarray:
    a = np.ascontiguousarray(a, F32)
    return a.view(np.uint32)


def same_bits(a, b) -> bool:
    return np.shape(a) == np.shape(b) and np.array_equal(bits(a), bits(b))


# ============================================================================ tf_linear

N, K = 37, 256          # 37 outputs: groups of 8 and 16 with a ragged tail; K: whole Q5_K/Q6_K blocks


def _hand_q8(flags: int, seed: int) -> Q.Packed:
    """A Q8 weight from the documented row-major form: int8 q (-128 included) and float32
    scales [n, k/32] (d[, m])."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-128, 128, (N, K), dtype=np.int8)
    planes = 1 + bool(flags & Q.HAS_MIN)
    return Q.pack_q8(N, K, flags, q, [rng.uniform(-0.02, 0.02, (N, K // 32)).astype(F32) for _ in range(planes)])


def _packs() -> dict[str, Q.Packed]:
    rng = np.random.default_rng(11)
    w = lambda: rng.standard_normal((N, K)).astype(F32) * F32(0.3)  # noqa: E731
    return {
        "q4a": Q.quantize_float(w(), "q4_0"),
        "q8": Q.quantize_float(w(), "q8_0"),
        "q8_min": _hand_q8(Q.HAS_MIN, 2),
        # the GGUF repacks, in whatever layout and scale encoding pack_gguf gives them
        "gguf_q6_k": Q.pack_gguf(QT.Q6_K, random_raw(QT.Q6_K, N, K, seed=1), N, K),
        "gguf_q5_k": Q.pack_gguf(QT.Q5_K, random_raw(QT.Q5_K, N, K, seed=2), N, K),
        "gguf_q4_k": Q.pack_gguf(QT.Q4_K, random_raw(QT.Q4_K, N, K, seed=4), N, K),
        "gguf_q8_0": Q.pack_gguf(QT.Q8_0, random_raw(QT.Q8_0, N, K, seed=3), N, K),
        "gguf_q5_0": Q.pack_gguf(QT.Q5_0, random_raw(QT.Q5_0, N, K, seed=5), N, K),     # the fixed offset
        "gguf_q4_1": Q.pack_gguf(QT.Q4_1, random_raw(QT.Q4_1, N, K, seed=6), N, K),     # a min plane
        "bf16": Q.quantize_float(w(), "bf16"),
    }


PACKS = _packs()
BIAS = (np.random.default_rng(12).standard_normal(N) * 2).astype(F32)


@pytest.fixture(params=[(name, b) for name in PACKS for b in (False, True)],
                ids=lambda p: p[0] + ("+bias" if p[1] else ""))
def weight(request):
    name, with_bias = request.param
    return PACKS[name], (BIAS if with_bias else None)


def acts(rows: int, seed: int) -> np.ndarray:
    """Activations with varied row scales, plus the act-quant edge cases: an all-zero
    block, a lone outlier, and exact ties (x * (1/d) = j + 0.5, d = 1) for round-half-even."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, K)) * 10.0 ** rng.uniform(-3, 2, (rows, 1))
    x = x.astype(F32)
    for r in range(rows):
        case = (r + seed) % 4
        if case == 1:
            x[r, 32:64] = 0
        elif case == 2:
            x[r, 64 + r % 32] = 1000.0
        elif case == 3:
            x[r, 96:128] = (np.arange(32) - 16) + F32(0.5)
            x[r, 96] = 127.0
    return x


def c_weight(p: Q.Packed, bias: np.ndarray | None = None) -> lib.Weight:
    """The C structure over p's arrays (p and bias must outlive it)."""
    return lib.Weight(p.fmt, p.flags, p.n, p.k, p.q.ctypes.data, p.s.ctypes.data if p.s.size else None,
                      bias.ctypes.data if bias is not None else None)


def linear(p: Q.Packed, x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    x = np.ascontiguousarray(x, F32)
    y = np.full((x.shape[0], p.n), np.nan, F32)
    w = c_weight(p, bias)
    assert L.tf_linear(C.byref(w), lib.ptr(x), x.shape[0], lib.ptr(y)) == 0
    return y


@pytest.mark.parametrize("isa", [i for i in ISAS if i != 0])
def test_linear_every_isa_matches_scalar_reference(weight, isa):
    p, bias = weight
    for rows in [*range(1, 10), 33]:
        x = acts(rows, seed=rows)
        use_isa(0)
        ref = linear(p, x, bias)
        use_isa(isa)
        got = linear(p, x, bias)
        assert same_bits(got, ref), f"isa {isa}, rows {rows}"


def _extreme_raw(qtype, n: int, k: int) -> np.ndarray:
    """Raw K-quant blocks whose integer sums are as large as the format allows: Q4_K and Q5_K
    values and codes all at their maximum; Q6_K values at -32 and codes at -128."""
    raw = random_raw(qtype, n, k, seed=13).reshape(n, k // 256, -1)
    if qtype == QT.Q6_K:
        raw[..., :192] = 0              # ql, qh: q = 0, value -32
        raw[..., 192:208] = 0x80        # scales: -128
    else:
        raw[..., 4:] = 0xFF             # past d and dmin: 6-bit codes 63, values 15 (Q5_K: 31)
    return raw.reshape(n, -1)


@pytest.mark.parametrize("isa", [i for i in ISAS if i != 0])
@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q5_K, QT.Q6_K])
def test_linear_integer_sums_at_their_bounds(qtype, isa):
    """Every ISA's exact integer parts hold at the largest sums a format allows (activations
    all at +-127, values and codes at their extremes): a SIMD path that narrowed a sum too far
    would differ from the scalar reference here."""
    p = Q.pack_gguf(qtype, _extreme_raw(qtype, N, K), N, K)
    for sign in (1.0, -1.0):
        for rows in (1, 4, 8, 9):
            x = np.full((rows, K), sign * 3.0, F32)
            use_isa(0)
            ref = linear(p, x)
            use_isa(isa)
            assert same_bits(linear(p, x), ref), f"isa {isa}, rows {rows}, sign {sign}"


@pytest.mark.parametrize("isa", ISAS)
def test_linear_row_invariance(weight, isa):
    """Row r of any batch equals the same row computed alone, whatever its neighbours hold."""
    p, bias = weight
    use_isa(isa)
    total = 256
    x = acts(total, seed=5)
    alone = np.concatenate([linear(p, x[r:r + 1], bias) for r in range(total)])
    other = acts(total, seed=6)
    sizes = [*range(1, 41), 64, 128, 256]
    for i, R in enumerate(sizes):
        for off in sorted({0, (7 * i + 3) % (total - R + 1), total - R}):
            assert same_bits(linear(p, x[off:off + R], bias), alone[off:off + R]), f"R={R} off={off}"
        # the same rows, sitting among different neighbours
        if R >= 3:
            mixed = other[:R].copy()
            keep = np.arange(i % 3, R, 3)
            mixed[keep] = x[keep]
            assert same_bits(linear(p, mixed, bias)[keep], alone[keep]), f"R={R} among other rows"


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.Q4_1, QT.Q5_0, QT.Q8_0])
def test_packing_is_the_same_on_any_thread_count(qtype):
    n, k = 301, 4096                  # past the size the packer splits among threads; a ragged group
    raw = random_raw(qtype, n, k, seed=9)
    packs = []
    for threads in (1, 3):
        use_threads(threads)
        packs.append(Q.pack_gguf(qtype, raw, n, k))
    assert np.array_equal(packs[0].q, packs[1].q) and np.array_equal(packs[0].s, packs[1].s)
    assert np.array_equal(Q.values(packs[1])[-1], Q.values(Q.pack_gguf(qtype, raw[-1:], 1, k))[0])


@pytest.mark.parametrize("rows", [1, 5, 256])   # 256 x 256 inputs: the quantization step runs on the pool too
def test_linear_thread_invariance(weight, rows):
    p, bias = weight
    x = acts(rows, seed=7)
    outs = []
    for n in (1, 2, 3):
        use_threads(n)
        outs.append(linear(p, x, bias))
    assert same_bits(outs[1], outs[0]) and same_bits(outs[2], outs[0])


def quantize_acts_np(x: np.ndarray, span: int = 32) -> np.ndarray:
    """The header's act-quant rule in numpy: per row, per span (32; 256 for K formats),
    d = amax/127 (float32), q = rne(x * (1/d)) (float32 product) clipped to +-127, 0 for an
    all-zero span.  Returns the dequantized activations q * d as float64."""
    b = x.reshape(x.shape[0], -1, span).astype(F32)
    d = (np.abs(b).max(-1) / F32(127)).astype(F32)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, F32(0), F32(1) / d).astype(F32)
    q = np.clip(np.rint(b * inv[..., None]), -127, 127)
    return (q * d[..., None].astype(np.float64)).reshape(x.shape)


def quantize_row(x: np.ndarray) -> tuple[np.ndarray, ...]:
    """tf_quantize_row of one row: its codes, scales, bases (-128 * the q sums) and xsums."""
    nb = x.size // 32
    q, s, base, xsum = np.empty(x.size, np.int8), np.empty(nb, F32), np.empty(nb, np.int32), np.empty(nb, F32)
    L.tf_quantize_row(lib.ptr(x), C.c_int(x.size), lib.ptr(q, C.c_int8), lib.ptr(s), lib.ptr(base, C.c_int32),
                      lib.ptr(xsum))
    return q, s, base, xsum


def rows_match_scalar(isa: int, x: np.ndarray, quantize, names: tuple[str, ...]) -> None:
    """Each row of x through `quantize` on `isa` gives the scalar path's arrays, bit for bit."""
    for r in range(x.shape[0]):
        row = np.ascontiguousarray(x[r])
        use_isa(0)
        ref = quantize(row)
        use_isa(isa)
        got = quantize(row)
        for name, a, b in zip(names, got, ref):
            assert a.tobytes() == b.tobytes(), f"row {r}: {name}"


@pytest.mark.parametrize("isa", [i for i in ISAS if i != 0])
def test_quantize_row_every_isa_matches_scalar_rule(isa):
    """The block activations' codes, scales, bases and xsums, bit for bit, on rows of 19
    blocks that hold zeros, a NaN, an infinity, spans too small to scale (amax < ~4e-37),
    denormals, exact ties and row scales across five decades (acts).  A NaN code is 0 on
    every path (the AVX2 clip alone would make it 127)."""
    rng = np.random.default_rng(21)
    rows = acts(6, seed=5)[:, :256]
    x = np.concatenate([rows, rows[:, :352]], axis=1).astype(F32)          # 608 = 19 blocks
    x[1, 0:32] = 0.0
    x[2, 40] = np.nan
    x[3, 100] = np.inf
    x[4, 160:192] = rng.standard_normal(32).astype(F32) * F32(1e-38)
    x[4, 200:232] = F32(1e-45) * np.arange(32, dtype=F32)
    x[5, 300:332] = F32(-1e-30)
    rows_match_scalar(isa, x, quantize_row, ("q", "s", "base", "xsum"))


def quantize_row_k(x: np.ndarray) -> tuple[np.ndarray, ...]:
    """tf_quantize_row_k of one row: its codes (the K kernels' order), scales, half-block
    sums and unsigned codes."""
    q, s = np.empty(x.size, np.int8), np.empty(x.size // 256, F32)
    bs, qu = np.empty(x.size // 16, np.int16), np.empty(x.size, np.uint8)
    L.tf_quantize_row_k(lib.ptr(x), C.c_int(x.size), lib.ptr(q, C.c_int8), lib.ptr(s), lib.ptr(bs, C.c_int16),
                        lib.ptr(qu, C.c_uint8))
    return q, s, bs, qu


@pytest.mark.parametrize("isa", [i for i in ISAS if i != 0])
def test_quantize_row_k_every_isa_matches_scalar_rule(isa):
    """The K form's codes, scales, half-block sums and unsigned codes, bit for bit, on rows
    of three super-blocks that hold zeros, a NaN, an infinity, a span too small to scale,
    denormals and row scales across five decades."""
    rng = np.random.default_rng(23)
    x = np.concatenate([acts(6, seed=7)[:, :256]] * 3, axis=1).astype(F32)          # 768 = 3 super-blocks
    x[1, 0:256] = 0.0
    x[2, 300] = np.nan
    x[3, 520] = -np.inf
    x[4, 256:512] = rng.standard_normal(256).astype(F32) * F32(1e-38)
    x[4, 600:632] = F32(1e-45) * np.arange(32, dtype=F32)
    x[5, 512:768] *= F32(1e4)
    rows_match_scalar(isa, x, quantize_row_k, ("q", "s", "bs", "qu"))


def weight_min(p: Q.Packed) -> np.ndarray:
    """The per-block additive term m of each weight element (0 when the format has none)."""
    if p.fmt in (Q.FMT_K4, Q.FMT_K5) or (p.fmt in (Q.FMT_Q4A, Q.FMT_Q8) and p.flags & Q.HAS_MIN):
        return np.repeat(Q.scales(p)[:, -1, :], 32, axis=-1)    # float32 [n, S, k/32]; m is the last
    return np.zeros((p.n, p.k), F32)


def test_linear_accuracy_against_float64(weight):
    p, bias = weight
    rows = 24
    x = acts(rows, seed=9)
    xa = x.astype(np.float64) if p.fmt == Q.FMT_BF16 else quantize_acts_np(x, 256 if p.fmt in Q.K_FORMATS else 32)
    w = Q.dequantize(p).astype(np.float64)
    b = np.zeros(p.n) if bias is None else bias.astype(np.float64)
    ref = xa @ w.T + b
    # The kernel sums a block's (K: super-block's) int products exactly, scales the sum once
    # by xs * d (two roundings) into one fp32 accumulator (one more), the min term likewise,
    # then adds the bias: about 4 * k/32 + 1 roundings of 2^-24 each, relative to the sum of
    # the magnitudes of what it adds (|x|*|q*d| and |x|*|m| separately).  Here that is
    # ~33 * 6e-8 < 2e-6; 1e-5 leaves margin yet catches one activation rounded the wrong
    # way (one q off by 1 in 256 terms of |q| ~ 60 is ~6e-5 of the scale).
    scale = np.abs(xa) @ (np.abs(w) + np.abs(weight_min(p).astype(np.float64))).T + np.abs(b)
    got = linear(p, x, bias)
    err = np.abs(got - ref)
    assert np.all(err <= 1e-5 * scale), f"worst {np.max(err / scale):.2e} of the scale"


def test_dequant_row_matches_reference():
    """The embedding lookup (tf_dequant_row) gives quant.dequantize's values, bit for bit."""
    for name, p in PACKS.items():
        ref = Q.dequantize(p)
        w = c_weight(p)
        out = np.empty(p.k, F32)
        for n in (0, 1, p.n - 1):
            L.tf_dequant_row(C.byref(w), n, lib.ptr(out))
            assert same_bits(out, ref[n]), f"{name} row {n}"


POOL_RACE = textwrap.dedent("""
    import ctypes as C, numpy as np
    from tensorfold.native import lib, quant as Q
    L = lib.load()
    p = Q.quantize_float(np.ones((8, 32), np.float32), "q8_0")
    w = lib.Weight(p.fmt, p.flags, p.n, p.k, p.q.ctypes.data, p.s.ctypes.data, None)
    x, y = np.ones((1, 32), np.float32), np.empty((1, 8), np.float32)
    for i in range(200):
        L.tf_pool_set_threads(1 + i % 2)      # stops or starts a worker
        assert L.tf_linear(C.byref(w), lib.ptr(x), 1, lib.ptr(y)) == 0
    print("done")
""")


def test_pool_first_job_after_resize():
    """A job run right after the pool grows must complete (in a subprocess: a lost wake-up hangs)."""
    try:
        out = subprocess.run([sys.executable, "-c", POOL_RACE], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("tf_pool_run hung: a worker started just before the job never ran it")
    assert out.stdout.strip() == "done", out.stderr


# ============================================================================ exp, fp16


def call_each(fn, values, dtype) -> np.ndarray:
    return np.fromiter((fn(v) for v in values.tolist()), dtype, len(values))


def test_exp_within_one_ulp():
    rng = np.random.default_rng(0)
    random_bits = rng.integers(0, 2**32, 400_000, dtype=np.uint64).astype(np.uint32).view(F32)
    x = np.concatenate([np.linspace(-87, 88, 100_001, dtype=F32),
                        random_bits[(random_bits >= -87) & (random_bits <= 88)],   # small |x| too
                        np.array([-87.0, 88.0, 0.0, -0.0, 1e-30, -1e-30], F32)])
    got = call_each(L.tf_exp, x, F32)
    ref = np.exp(x.astype(np.float64)).astype(F32)
    ulps = np.abs(got.view(np.int32).astype(np.int64) - ref.view(np.int32))
    assert ulps.max() <= 1, f"exp({x[ulps.argmax()]!r}) is {ulps.max()} ulp off"


def test_exp_edges():
    for v in (-88.0, -1000.0, float("-inf")):
        r = L.tf_exp(v)
        assert r == 0.0 and np.copysign(1.0, r) == 1.0, v
    assert np.isnan(L.tf_exp(float("nan")))


def softmax_rows(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out, den = s.copy(), np.zeros(len(s), F32)
    L.tf_softmax_rows(lib.ptr(out), len(s), s.shape[1], s.shape[1], lib.ptr(den))
    return out, den


@pytest.mark.parametrize("n", [1, 15, 16, 17, 555])
def test_softmax_rows_same_bits_on_every_isa(n):
    """Attention's softmax: each path's exp(s - max) and lanes8 sum, bit for bit the
    scalar exp's, over scores that reach the clamps, infinities, zeros of both signs."""
    rng = np.random.default_rng(n)
    s = (rng.standard_normal((6, n)) * np.array([[1], [30], [200], [1], [1], [1]])).astype(F32)
    s[3, ::3], s[4, 1::4] = -np.inf, -0.0
    s[5] = 0.0
    s[5, n // 2] = -0.0
    ref = None
    for isa in ISAS:
        use_isa(isa)
        got = softmax_rows(s)
        if ref is None:
            ref = got
            want = np.array([L.tf_exp(float(v - s[1].max())) for v in s[1]], F32)
            assert same_bits(got[0][1], want)
        assert same_bits(got[0], ref[0]) and same_bits(got[1], ref[1]), f"isa {isa}"
    assert np.allclose(ref[1], ref[0].astype(np.float64).sum(1), rtol=1e-5, equal_nan=True)


def test_h2f_all_halves():
    h = np.arange(65536, dtype=np.uint32)
    got = call_each(L.tf_h2f, h, F32)
    ref = h.astype(np.uint16).view(np.float16).astype(F32)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan)
    assert same_bits(got[~nan], ref[~nan])


def test_f2h_round_to_nearest_even():
    rng = np.random.default_rng(1)
    lo = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    hi = np.arange(1, 0x7C01, dtype=np.uint16).view(np.float16).astype(np.float64)
    ties = ((lo + hi) / 2).astype(F32)                     # every halfway point, subnormals to 65520
    assert np.array_equal(ties.astype(np.float64), (lo + hi) / 2)   # (exact in float32)
    f = np.concatenate([
        rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(F32),   # every exponent
        (rng.standard_normal(50_000) * 10.0 ** rng.uniform(-9, 6, 50_000)).astype(F32),  # subnormal..overflow
        ties, -ties, np.nextafter(ties, F32(np.inf)), np.nextafter(ties, F32(0)),
        np.array([np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.996, 65520, 1e6, 2.0**-25, 2.0**-24,
                  2.0**-26, 0.0, -0.0, 1e-45], F32)])
    got = call_each(L.tf_f2h, f, np.uint16)
    with np.errstate(over="ignore"):
        ref = f.astype(np.float16).view(np.uint16)
    nan = np.isnan(f)
    assert np.all(np.isnan(got[nan].view(np.float16)))
    bad = np.flatnonzero((got != ref) & ~nan)
    assert bad.size == 0, f"f2h({f[bad[0]]!r}) = {got[bad[0]]:#06x}, expected {ref[bad[0]]:#06x}"
    # the row conversion (the KV write; F16C where present) gives tf_f2h's bits, NaN included
    for soft in (0, 1):
        L.tf_set_soft_fp16(soft)
        rows = np.zeros(f.size, np.uint16)
        L.tf_f2h_row(lib.ptr(f), lib.ptr(rows, C.c_uint16), f.size)
        assert np.array_equal(rows, got), f"soft={soft}"


# ============================================================================ rms_norm, silu_mul


@pytest.mark.parametrize("k", [8, 64, 256, 4096])
def test_rms_norm_close_to_float64(k):
    rng = np.random.default_rng(k)
    eps = F32(1e-6)
    for scale in (1e-3, 1.0, 300.0):
        x = (rng.standard_normal(k) * scale).astype(F32)
        w = (1 + rng.standard_normal(k) * 0.1).astype(F32)
        out = np.empty(k, F32)
        L.tf_rms_norm(lib.ptr(x), lib.ptr(w), float(eps), k, lib.ptr(out))
        xd = x.astype(np.float64)
        ref = xd / np.sqrt(np.mean(xd * xd) + float(eps)) * w
        # The sum of squares: each of 8 lanes adds k/8 positive terms, then tree8: relative
        # error <= (k/8 + 3) u (u = 2^-24); halved by the square root; plus /k, +eps, sqrt, 1/,
        # and two multiplies: ~6 u more.  Bound (k/16 + 8) u relative, per element.
        tol = (k / 16 + 8) * 2.0**-24
        assert np.all(np.abs(out - ref) <= tol * np.abs(ref) + 1e-37), f"k={k} scale={scale}"


def test_silu_mul_close_to_float64():
    rng = np.random.default_rng(3)
    g = np.concatenate([rng.standard_normal(20_000) * 4, rng.uniform(-87, 87, 5_000),
                        [0.0, -0.0, 1e-30, -1e-30, 87.0, -87.0]]).astype(F32)
    u = rng.standard_normal(g.size).astype(F32)
    out = np.empty(g.size, F32)
    L.tf_silu_mul(lib.ptr(g), lib.ptr(u), lib.ptr(out), g.size)
    gd = g.astype(np.float64)
    ref = gd / (1 + np.exp(-gd)) * u
    # every instruction set gives the scalar reference's bits (odd lengths take the tails)
    edge = np.array([np.nan, np.inf, -np.inf, 88.5, -88.5, 1e38, -1e38], F32)
    gg, uu = np.concatenate([g, edge]), np.concatenate([u, np.ones(edge.size, F32)])
    want = None
    for isa in ISAS:
        use_isa(isa)
        got = np.empty(gg.size, F32)
        L.tf_silu_mul(lib.ptr(gg), lib.ptr(uu), lib.ptr(got), gg.size)
        want = got if want is None else want
        assert same_bits(got, want), f"isa {isa}"
    # exp within 1 ulp, then +1, /, * each rounded once: under 4 ulp in all; 8 u relative
    # leaves margin.  The absolute floor covers results in the float32 subnormal range.
    assert np.all(np.abs(out - ref) <= 8 * 2.0**-24 * np.abs(ref) + 1e-38)


def test_silu_mul_saturates():
    """Past exp's clamp (|g| > 88) the result stays finite and tends to g*u or 0.  (Far past it,
    g / exp(88) is no longer small: silu(-1e30) comes out -6e-9, not -0; no activation gets there.)"""
    g = np.array([-200.0, -89.0, -1000.0, 89.0, 200.0, 1e30], F32)
    u = np.full(g.size, 2.0, F32)
    out = np.empty(g.size, F32)
    L.tf_silu_mul(lib.ptr(g), lib.ptr(u), lib.ptr(out), g.size)
    assert np.all(np.isfinite(out))
    assert np.all(np.abs(out[:3]) < 2e-35)
    assert np.array_equal(out[3:], g[3:] * 2)


# ============================================================================ the forward

PROMPT = 70
BS = 16


@pytest.fixture(scope="module")
def folders(tmp_path_factory, default_model):
    from tests.tiny import make_tiny_checkpoint

    root = tmp_path_factory.mktemp("native")
    return {
        "llama": make_tiny_checkpoint(root / "llama", default_model),
        "qwen3": make_tiny_checkpoint(root / "qwen3", default_model, arch="Qwen3ForCausalLM"),
        # head_dim 64 and five query heads per kv head: the vector attention paths (the
        # others' head_dim 16 takes the scalar one), the five query heads in one pass (AVX2's
        # wide form) or three and two (AVX-512, NEON, and AVX2's values)
        "gqa": make_tiny_checkpoint(root / "gqa", default_model, hidden=320, heads=5, kv_heads=1),
        # head_dim 128, two query heads per kv head
        "wide": make_tiny_checkpoint(root / "wide", default_model, hidden=256, heads=2, kv_heads=1),
    }


def native(folder, weights: str, kv_cache: str = "fp16"):
    from tensorfold.native.runner import NativeRunner

    r = NativeRunner(folder, weights=weights, threads=1, kv_cache=kv_cache)
    r.allocate_kv(32, BS)
    return r


def poison_kv(r) -> None:
    """Fill the whole KV map with fp16 NaN (int8: codes -1 and NaN scales): a read of a slot
    not yet written shows in the logits."""
    for area in (r.model._kv, r.model._scales):
        if area is not None:
            area.seek(0)
            area.write(b"\xff" * len(area))


def prefill(r, tokens, table, chunk: int | None = None) -> torch.Tensor:
    chunk = chunk or len(tokens)
    out = []
    for s in range(0, len(tokens), chunk):
        part = tokens[s:s + chunk]
        out.append(torch.from_numpy(r.forward(part, [r.segment(table, s, len(part))], list(range(len(part))))))
    return torch.cat(out)


def tbits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def assert_same(got, want, what: str) -> None:
    """The same bits (tensors, or the native forward's arrays)."""
    got, want = torch.as_tensor(got), torch.as_tensor(want)
    assert got.shape == want.shape, what
    diff = (tbits(got) != tbits(want)).any(-1).nonzero().flatten().tolist()
    assert not diff, f"{what}: rows {diff[:10]} differ (max abs {(got - want).abs().max().item():.3g})"


def assert_batched_both_orders(r, tokens, other, segs, whole, other_alone, poison) -> None:
    """One forward of `tokens` and an unrelated sequence `other` (segs: theirs, in that order),
    in both orders: each gets the bits it gets alone (whole, other_alone)."""
    for first in (True, False):
        poison()
        toks = tokens + other
        if not first:
            segs, toks = segs[::-1], other + tokens
        both = r.forward(toks, segs, list(range(len(toks))))
        n = len(tokens)
        mine, theirs = (both[:n], both[n:]) if first else (both[len(other):], both[:len(other)])
        assert_same(mine, whole, f"batched with another sequence (first={first})")
        assert_same(theirs, other_alone, f"the other sequence (first={first})")


def kv_ahead_in_a_process(value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TENSORFOLD_KV_AHEAD"}
    if value is not None:
        env["TENSORFOLD_KV_AHEAD"] = value
    code = "from tensorfold.native import lib; l = lib.load(); print(l.tf_kv_ahead())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_kv_read_ahead_defaults_to_amd_cpus_and_the_environment_overrides_it():
    """The next layer's KV is read ahead by default where it was measured to help (AMD), not
    elsewhere (an Intel Ice Lake: slower); TENSORFOLD_KV_AHEAD=1 or 0 says otherwise."""
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", open("/proc/cpuinfo").read(), re.M) if sys.platform == "linux" else None
    want = "1" if vendor and vendor.group(1) == "AuthenticAMD" else "0"
    assert L.tf_kv_ahead_default() == int(want)
    assert kv_ahead_in_a_process(None).stdout.split() == [want]
    for value in ("0", "1"):
        assert kv_ahead_in_a_process(value).stdout.split() == [value]
    bad = kv_ahead_in_a_process("yes")
    assert bad.returncode != 0 and "TENSORFOLD_KV_AHEAD=yes" in bad.stderr


CASES = [("llama", "q8_0", "fp16"), ("qwen3", "q8_0", "fp16"), ("llama", "q4_0", "fp16"), ("qwen3", "bf16", "fp16"),
         ("gqa", "q8_0", "fp16"), ("qwen3", "q8_0", "int8"), ("gqa", "q8_0", "int8")]


@pytest.mark.parametrize("arch,weights,kv", CASES, ids=[f"{a}-{w}-kv-{k}" for a, w, k in CASES])
def test_forward_logits_identical_however_run(folders, arch, weights, kv):
    r = native(folders[arch], weights, kv)
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, r.vocab_size, PROMPT).tolist()
    other = rng.integers(0, r.vocab_size, 45).tolist()
    A, O = [0, 1, 2, 3, 4], [5, 6, 7]
    poison_kv(r)
    whole = prefill(r, tokens, A)
    assert torch.isfinite(whole).all()
    other_alone = prefill(r, other, O)

    for chunk in (1, 7, 16, 33):
        poison_kv(r)
        assert_same(prefill(r, tokens, A, chunk), whole, f"chunks of {chunk}")

    # one forward with an unrelated sequence, in both orders
    assert_batched_both_orders(r, tokens, other, [r.segment(A, 0, PROMPT), r.segment(O, 0, len(other))],
                               whole, other_alone, lambda: poison_kv(r))

    # the sequence's blocks anywhere in the map, not contiguous, not in order
    poison_kv(r)
    assert_same(prefill(r, tokens, [27, 3, 19, 8, 30]), whole, "other block ids")

    # decode after a prefill, alone and batched with another sequence's decode
    poison_kv(r)
    head = prefill(r, tokens[:40], A)
    prefill(r, other[:15], O)
    rows = [head]
    for p in range(40, PROMPT):
        q = p - 25                      # the other sequence's position: 15..44
        step = r.forward([tokens[p], other[q]], [r.segment(A, p, 1), r.segment(O, q, 1)], [0, 1])
        rows.append(torch.from_numpy(step[:1]))
        assert_same(step[1:], other_alone[q:q + 1], f"the other sequence's decode at {q}")
    assert_same(torch.cat(rows), whole, "prefill 40 then decode")

    # thread count (the model's own count, out of the shared pool), instruction set, fp16 conversion
    use_threads(3)
    for n in (2, 3):
        r.model.struct.threads = n
        assert_same(prefill(r, tokens, A), whole, f"{n} threads")
        assert_same(prefill(r, tokens, A, 7), whole, f"{n} threads, chunks of 7")
        # two sequences of unequal length: the threads' attention shares, evened by keys read, split them unevenly
        assert_batched_both_orders(r, tokens, other, [r.segment(A, 0, PROMPT), r.segment(O, 0, len(other))],
                                   whole, other_alone, lambda: poison_kv(r))
    r.model.struct.threads = 1
    for on in (1, 0):                   # the next layer's KV read ahead or not (tf_ahead.h): only memory traffic
        L.tf_set_kv_ahead(on)
        assert L.tf_kv_ahead() == on
        assert_same(prefill(r, tokens, A), whole, f"KV read ahead {on}")
        assert_same(prefill(r, tokens, A, 7), whole, f"KV read ahead {on}, chunks of 7")
    L.tf_set_kv_ahead(-1)
    for isa in range(L.tf_best_isa() + 1):               # scalar, then AVX2 and AVX-512 where present
        if isa != 3:
            use_isa(isa)
            assert_same(prefill(r, tokens, A), whole, f"ISA {isa}")
    use_isa(L.tf_best_isa())
    L.tf_set_soft_fp16(1)
    assert_same(prefill(r, tokens, A), whole, "software fp16 conversion")


@pytest.mark.parametrize("kv", ["fp16", "int8"])
@pytest.mark.parametrize("arch", ["gqa", "wide"])
def test_attention_at_the_default_block_size_same_bits_on_every_isa(folders, arch, kv):
    """Blocks of 32 (the engine's default) with head_dim 64 or 128: the shapes the AVX2
    attention compiles with constant sizes.  Prefill (a partial last block), chunked
    prefill and batched decode give the scalar reference's bits on every instruction set."""
    from tensorfold.native.runner import NativeRunner

    r = NativeRunner(folders[arch], weights="q8_0", threads=1, kv_cache=kv)
    r.allocate_kv(16, 32)
    rng = np.random.default_rng(9)
    tokens, other = rng.integers(0, r.vocab_size, 100).tolist(), rng.integers(0, r.vocab_size, 40).tolist()
    A, O = [3, 0, 9, 5], [7, 12]
    use_isa(0)
    whole, other_alone = prefill(r, tokens, A), prefill(r, other, O)
    for isa in ISAS:
        if isa == 3:
            continue
        use_isa(isa)
        poison_kv(r)
        assert_same(prefill(r, tokens, A, 33), whole, f"ISA {isa}, chunks of 33")
        prefill(r, other[:20], O)
        for q in range(20, 40):         # decode beside the other sequence's
            p = q + 60
            step = r.forward([tokens[p], other[q]], [r.segment(A, p, 1), r.segment(O, q, 1)], [0, 1])
            assert_same(step[:1], whole[p:p + 1], f"ISA {isa}, decode at {p}")
            assert_same(step[1:], other_alone[q:q + 1], f"ISA {isa}, the other's decode at {q}")


# ============================================================================ against the fp32 model


def reference_pair(folder, weights: str, tokens):
    from tensorfold.backends.torch.runner import TorchRunner

    ref = TorchRunner(folder, dtype="float32", device="cpu")
    ref.allocate_kv(8, BS)
    want = ref.forward(tokens, [ref.segment(list(range(5)), 0, len(tokens))], list(range(len(tokens))))
    got = prefill(native(folder, weights), tokens, list(range(5)))
    return got, want


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_forward_bf16_close_to_fp32_model(tmp_path, folders, arch):
    """With weights that are exact in bf16, only the arithmetic differs from the fp32 torch
    model: fp16 KV (K and V rounded to 2^-11 relative) and the fp32 summation order.
    Measured: max |diff| 1.3e-3 on logits up to ~13 (llama), 1.2e-3 (qwen3); bound 5e-3."""
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / arch
    shutil.copytree(folders[arch], folder)
    w = load_file(folder / "model.safetensors")
    save_file({k: v.to(torch.bfloat16).float().contiguous() for k, v in w.items()}, str(folder / "model.safetensors"))
    tokens = np.random.default_rng(8).integers(0, 49152, PROMPT).tolist()
    got, want = reference_pair(folder, "bf16", tokens)
    diff = (got - want).abs().max().item()
    assert diff < 5e-3, diff


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_forward_q8_close_to_fp32_model(folders, arch):
    """q8_0 weights and int8 activations: measured mean KL 3.4e-4 (max 6e-4) and top-1
    agreement 97-99% over 70 positions of a random tiny model (flat logits, near ties);
    bounds: mean KL < 2e-3, max KL < 5e-3, top-1 >= 90%."""
    tokens = np.random.default_rng(8).integers(0, 49152, PROMPT).tolist()
    got, want = reference_pair(folders[arch], "q8_0", tokens)
    lg, lw = torch.log_softmax(got.double(), -1), torch.log_softmax(want.double(), -1)
    kl = (lw.exp() * (lw - lg)).sum(-1)
    top1 = (got.argmax(-1) == want.argmax(-1)).double().mean().item()
    assert kl.mean().item() < 2e-3 and kl.max().item() < 5e-3, (kl.mean().item(), kl.max().item())
    assert top1 >= 0.9, top1


# ============================================================================ idle KV memory


def resident_bytes(address: int, length: int) -> int:
    """Bytes of [address, address + length) (page aligned) backed by memory now (mincore)."""
    page = os.sysconf("SC_PAGE_SIZE")
    pages = -(-length // page)
    vec = (C.c_ubyte * pages)()
    libc = C.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [C.c_void_p, C.c_size_t, C.POINTER(C.c_ubyte)]
    assert libc.mincore(C.c_void_p(address), C.c_size_t(length), vec) == 0, os.strerror(C.get_errno())
    return sum(v & 1 for v in vec) * page


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore on Linux")
@pytest.mark.parametrize("kv", ["fp16", "int8"])
def test_trimmed_kv_blocks_go_back_to_the_system(folders, kv):
    r = native(folders["llama"], "q8_0", kv)
    address, size = C.addressof(r.model._kv_view), len(r.model._kv)
    tokens = list(range(3, 3 + 4 * BS))
    assert resident_bytes(address, size) == 0           # backed only as written
    prefill(r, tokens, [0, 1, 2, 3])
    m = r.model.struct                                  # a block's keys and values in every layer:
    block = m.block_stride if r.model._block_major else 2 * r.model.args.layers * m.block_stride
    assert resident_bytes(address, size) >= 4 * block
    r.trim_kv([0, 1, 2, 3])
    # fp16: each block's part of a layer is whole pages; int8 blocks are not padded, so a
    # page that a trimmed run shares with a block beyond it stays (one at each run's end)
    left = 0 if kv == "fp16" else 2 * 2 * r.model.args.layers * os.sysconf("SC_PAGE_SIZE")
    assert resident_bytes(address, size) <= left
    assert kv == "fp16" or r.model.kv_bytes_per_token() == 2 * r.model.args.layers * r.model.args.kv_heads * (
        r.model.args.head_dim + 4)
    # a trimmed block is written again before it is read: the same logits as before
    again = prefill(r, tokens, [0, 1, 2, 3])
    fresh = native(folders["llama"], "q8_0", kv)
    assert_same(again, prefill(fresh, tokens, [0, 1, 2, 3]), "after a trim")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_a_loaded_gguf_is_not_kept_mapped(default_model):
    """The weights are repacked into memory of their own, so once loaded nothing holds the
    GGUF's map: its pages would count again in the daemon's resident memory."""
    import gc

    from tensorfold.checkpoints.files import gguf_file

    path = str(gguf_file(default_model).resolve())
    r = native(default_model, "auto")
    gc.collect()
    assert r.weights == "gguf"
    assert path not in open("/proc/self/maps").read()


def vm_flags(address: int) -> list[str]:
    """The VmFlags of the map that holds `address` (/proc/self/smaps)."""
    inside, flags = False, []
    for line in open("/proc/self/smaps"):
        span = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
        if span:
            inside = int(span[1], 16) <= address < int(span[2], 16)
        elif inside and line.startswith("VmFlags:"):
            flags = line.split()[1:]
    return flags


@pytest.mark.parametrize("enabled, size, want", [
    ("always [madvise] never", 2 << 20, True), ("[always] madvise never", 2 << 20, True),
    ("always madvise [never]", 2 << 20, False), ("always [madvise] never", 512 << 20, False),
    (None, None, False)])
def test_huge_pages_only_of_2_mb_and_not_turned_off(tmp_path, enabled, size, want):
    if enabled is not None:
        (tmp_path / "enabled").write_text(enabled + "\n")
        (tmp_path / "hpage_pmd_size").write_text(f"{size}\n")
    assert _huge_pages(tmp_path) is want


@pytest.mark.skipif(not _huge_pages(), reason="no transparent huge pages")
def test_weights_and_kv_live_in_maps_advised_for_huge_pages(default_model):
    """Every matmul weight's arrays lie in one anonymous map with the huge-page advice
    (smaps flag hg), so small tensors stream without a page walk every 4 KB; the KV map
    has it too, block-major (a block's every layer side by side)."""
    r = native(default_model, "auto")
    area = r.model._weights_map
    start = np.frombuffer(area, np.uint8).ctypes.data
    end = start + len(area)
    m = r.model.struct
    weights = [m.head, m.embed] + [getattr(m.layer[i], f) for i in range(m.layers)
                                   for f in ("q", "k", "v", "o", "gate", "up", "down")]
    for w in weights:
        assert start <= w.q < end and (not w.s or start <= w.s < end)
    assert "hg" in vm_flags(start)
    assert "hg" in vm_flags(m.kv)
    assert 0 <= m.block_stride - m.kv_stride * 2 * m.layers < os.sysconf("SC_PAGE_SIZE")


def test_cache_hands_out_written_free_blocks_once():
    from tensorfold.engine.cache import BlockCache

    cache = BlockCache(8, 4)
    a = cache.allocate(3)
    cache.register(a[0], 0, [1, 2, 3, 4])             # a full block: cached when released
    assert cache.take_trimmable() == []               # all in use
    cache.release(a)
    assert cache.take_trimmable() == sorted(a[1:])    # the cached block keeps its KV
    assert cache.take_trimmable() == []               # only once until written again
    b = cache.allocate(1)
    cache.release(b)
    assert cache.take_trimmable() == b


@pytest.mark.parametrize("isa", [i for i in ISAS if i != 0])
def test_a_ranks_rows_give_the_whole_weights_outputs(weight, isa):
    """A rank keeps a run of each weight's rows (native/shard.py): those rows, as a weight of their
    own, give the whole weight's outputs bit for bit, at 1 and 8 rows of activations."""
    from tensorfold.native.shard import take_bias, take_rows

    p, bias = weight
    use_isa(isa)
    for rows in (1, 8):
        x = acts(rows, seed=13)
        whole = linear(p, x, bias)
        for a, b in ((0, 16), (16, 32), (32, p.n), (16, p.n)):
            part = linear(take_rows(p, a, b), x, take_bias(bias, a, b))
            assert same_bits(part, whole[:, a:b]), (a, b, rows)
    if p.fmt != Q.FMT_BF16:         # packed in groups of 8 or 16 rows: a cut inside one is refused
        with pytest.raises(ValueError, match="groups"):
            take_rows(p, 4, 32)


@pytest.mark.parametrize("arch", ["qwen3", "gqa", "wide"])
def test_int8_kv_close_to_fp16_kv(folders, arch):
    """--kv-cache int8 against fp16 with bf16 weights (so activations are not quantized and
    only the KV differs): each position's key and value of a kv head rounded to 1/254 of
    its largest element.  Measured over 70 positions: mean KL 4e-6 (qwen3) to 1.7e-3 (gqa),
    max up to 1.1e-2, top-1 93-100% (random tiny models: flat logits, near ties); bounds:
    mean KL < 4e-3, max < 3e-2, top-1 >= 85%."""
    tokens = np.random.default_rng(8).integers(0, 49152, PROMPT).tolist()
    fp16 = prefill(native(folders[arch], "bf16"), tokens, list(range(5)))
    int8 = prefill(native(folders[arch], "bf16", "int8"), tokens, list(range(5)))
    lf, li = torch.log_softmax(fp16.double(), -1), torch.log_softmax(int8.double(), -1)
    kl = (lf.exp() * (lf - li)).sum(-1)
    top1 = (fp16.argmax(-1) == int8.argmax(-1)).double().mean().item()
    assert kl.mean().item() < 4e-3 and kl.max().item() < 3e-2, (kl.mean().item(), kl.max().item())
    assert top1 >= 0.85, top1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore on Linux")
def test_rope_rows_are_written_as_positions_are_reached(folders, monkeypatch):
    """The rope tables are backed only as far as forwards have reached, a step of rows at a
    time, and a forward reads the same rows as from tables built whole beforehand."""
    from tensorfold.backends.model_args import rope_tables
    from tensorfold.native import rope

    monkeypatch.setattr(rope, "FILL_STEP", 16)
    tokens = list(range(3, 3 + PROMPT))
    r = native(folders["llama"], "q8_0")
    tables = r.model.rope
    row = tables.cos[0].nbytes
    assert tables.filled == 0
    assert resident_bytes(tables.cos.ctypes.data, tables.cos.nbytes) == 0
    lazy = prefill(r, tokens, [0, 1, 2, 3, 4], chunk=24)           # steps of 16 rows, reached 24 at a time
    assert tables.filled == 80
    assert resident_bytes(tables.cos.ctypes.data, tables.cos.nbytes) <= 80 * row + 2 * os.sysconf("SC_PAGE_SIZE")
    cos, sin = rope_tables(tables.inv_freq, tables.positions)
    assert np.array_equal(tables.cos[:80], cos[:80]) and np.array_equal(tables.sin[:80], sin[:80])
    whole = native(folders["llama"], "q8_0")
    whole.model.rope.cover(whole.model.rope.positions)
    assert_same(lazy, prefill(whole, tokens, [0, 1, 2, 3, 4], chunk=24), "rope rows written on the way")
