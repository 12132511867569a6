"""Repacking GGUF weights into the C kernels' layouts (tensorfold.native.quant)."""

import ctypes as C

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import quants as gq
from gguf.constants import GGML_QUANT_SIZES

from tensorfold.native import quant as Q

# byte offsets of the fp16 fields to overwrite with finite values, per block
FP16_FIELDS = {
    QT.Q4_0: [0],
    QT.Q4_1: [0, 2],
    QT.Q5_0: [0],
    QT.Q5_1: [0, 2],
    QT.Q8_0: [0],
    QT.Q4_K: [0, 2],
    QT.Q5_K: [0, 2],
    QT.Q6_K: [208],
}


def random_raw(qtype, n, k, seed=0):
    """Random raw ggml blocks [n, bytes_per_row] with finite, moderate fp16 fields."""
    rng = np.random.default_rng(seed)
    bs, ts = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n, k // bs, ts), dtype=np.uint8)
    for off in FP16_FIELDS[qtype]:
        vals = rng.uniform(-2.0, 2.0, size=(n, k // bs)).astype(np.float16)
        vals[0, 0] = 0.0  # a zero scale too
        raw[..., off:off + 2] = vals[..., None].view(np.uint8)
    return raw.reshape(n, -1)


def bits(a):
    # x + 0.0 maps -0.0 to +0.0 and leaves every other float32 unchanged
    return (np.asarray(a, np.float32) + np.float32(0)).view(np.uint32)


@pytest.mark.parametrize("qtype", list(FP16_FIELDS))
@pytest.mark.parametrize("k", [256, 512])
def test_gguf_repack_matches_gguf_reference(qtype, k):
    n = 5
    raw = random_raw(qtype, n, k, seed=k + int(qtype))
    p = Q.pack_gguf(qtype, raw, n, k)
    assert p.q.flags.c_contiguous and p.s.flags.c_contiguous
    assert p.q.dtype == p.s.dtype == np.uint8
    assert Q.scales(p).shape[::2] == (n, k // 32)
    got = Q.dequantize(p)
    ref = gq.dequantize(raw, qtype).reshape(n, k).astype(np.float32)
    assert got.dtype == np.float32 and got.shape == (n, k)
    assert np.all(np.isfinite(ref))
    if qtype in (QT.Q4_0, QT.Q5_0):
        # gguf computes (q - 8) * d, we compute q * d + (-8 * d) (Q5_0: 16).  Both are exact
        # (q * d, 8 * d and (q - 8) * d all fit in float32), so the values are
        # identical; only the sign of zero can differ (q == 8 with d < 0 gives
        # -0.0 in gguf, +0.0 here).  Compare bits with zeros normalised.
        assert np.array_equal(bits(got), bits(ref))
    else:
        # same float32 operations in the same order: bit for bit, -0.0 included
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))


# fmt, flags, S, bytes per 32 weights in memory (GGUF's own in the comment)
LAYOUTS = {
    QT.Q4_0: (Q.FMT_Q4A, Q.HALF, 1, 18),                        # 18
    QT.Q4_1: (Q.FMT_Q4A, Q.HAS_MIN | Q.HALF, 2, 20),            # 20
    QT.Q5_0: (Q.FMT_Q4A, Q.HIGH | Q.HALF, 1, 22),               # 22
    QT.Q5_1: (Q.FMT_Q4A, Q.HIGH | Q.HAS_MIN | Q.HALF, 2, 24),   # 24
    QT.Q8_0: (Q.FMT_Q8, Q.HALF, 1, 34),                         # 34
    QT.Q4_K: (Q.FMT_K4, 0, 0, 18),                              # 18
    QT.Q5_K: (Q.FMT_K5, 0, 0, 22),                              # 22
    QT.Q6_K: (Q.FMT_K6, 0, 0, 26.75),                           # 26.25
}
BLOCK_LAYOUTS = [qt for qt in LAYOUTS if LAYOUTS[qt][0] not in Q.K_FORMATS]


@pytest.mark.parametrize("qtype", list(LAYOUTS))
def test_gguf_formats_shapes_and_sizes(qtype):
    n, k = 3, 512
    fmt, flags, S, per32 = LAYOUTS[qtype]
    p = Q.pack_gguf(qtype, random_raw(qtype, n, k), n, k)
    nb = k // 32
    assert (p.fmt, p.flags, p.n, p.k) == (fmt, flags, n, k)
    # in groups of outputs (K: eight, blocks: sixteen), the last one padded; records on
    # 64-byte boundaries
    size = 8 if fmt in Q.K_FORMATS else 16
    assert Q.nbytes(p) * 32 == per32 * size * k and Q.nbytes(p) == p.q.nbytes + p.s.nbytes
    assert p.q.dtype == np.uint8 and p.s.dtype == np.uint8
    assert p.q.shape[0] == p.s.shape[0] == 1 and p.q.shape[1] % 64 == 0
    assert p.q.ctypes.data % 64 == 0 and p.s.ctypes.data % 64 == 0
    assert Q.values(p).shape == (n, nb, 32)
    if fmt in Q.K_FORMATS:
        assert Q.scales(p).shape == (n, 2, nb)
        with pytest.raises(ValueError):
            Q.expand(p)
        return
    assert Q.scales(p).shape == (n, S, nb)
    # the float32 form holds the same values
    e = Q.expand(p)
    assert not e.flags & (Q.HALF | Q.HIGH)
    assert np.array_equal(Q.dequantize(e).view(np.uint32), Q.dequantize(p).view(np.uint32))


def test_half_falls_back_to_float32_when_not_exact():
    # a min of 2^17 is past fp16's range, so the planes stay float32
    d, m = np.full((2, 2), 0.5, np.float32), np.full((2, 2), 0.25, np.float32)
    qs = np.zeros((2, 32), np.uint8)
    assert Q.pack_q4a(2, 64, qs, d, m, half=True).flags == Q.HALF | Q.HAS_MIN
    m[1, 1] = 131072.0
    p = Q.pack_q4a(2, 64, qs, d, m, half=True)
    assert p.flags == Q.HAS_MIN and Q.scales(p)[1, 1, 1] == 131072.0


@pytest.mark.parametrize("qtype, offset", [(QT.Q4_0, 8), (QT.Q5_0, 16)])
def test_q4_0_and_q5_0_keep_their_offset_exact(qtype, offset):
    # one fp16 scale plane, the file's d; the integers are the stored values less the offset
    size = 18 if qtype == QT.Q4_0 else 22
    raw = random_raw(qtype, 2, 64)
    p = Q.pack_gguf(qtype, raw, 2, 64)
    d = raw.reshape(2, 2, size)[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    assert Q.scales(p).shape == (2, 1, 2) and np.array_equal(Q.scales(p)[:, 0], d)
    v = Q.values(p)
    assert v.min() >= -offset and v.max() < offset and v.min() < 0


def k_scales(sb):
    """Q4_K/Q5_K's 12 bytes of 6-bit codes [..., 12] -> (sc, mn) [..., 8]: blocks 0..3 the low
    6 bits of bytes 0..3 (sc) and 4..7 (mn); blocks 4..7 the nibbles of bytes 8..11 with
    the top 2 bits of bytes 0..3 (sc) and 4..7 (mn)."""
    a, b, c = sb[..., 0:4], sb[..., 4:8], sb[..., 8:12]
    sc = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 2) & 0x30)], axis=-1)
    return sc, mn


def k_low_nibbles(qs):
    """128 nibble bytes [..., 128] -> [..., 8, 32]: block 2j the low nibbles of bytes 32j.., 2j+1 the high."""
    g = qs.reshape(*qs.shape[:-1], 4, 1, 32)
    return np.concatenate([g & 0x0F, g >> 4], axis=-2).reshape(*qs.shape[:-1], 8, 32)


def k6_values(ql, qh):
    """Q6_K's ql [..., 128], qh [..., 64] -> values 0..63 [..., 8, 32]: half h's blocks 4h + t take
    the low (t < 2) or high nibbles of ql[64h + 32(t & 1) + e] and bits 2t, 2t + 1 of qh[32h + e]."""
    lead = ql.shape[:-1]
    lo = ql.reshape(*lead, 2, 1, 2, 32)
    lo = np.concatenate([lo & 0x0F, lo >> 4], axis=-3)
    hi = qh.reshape(*lead, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8)[:, None]
    return (lo.reshape(*lead, 2, 4, 32) | ((hi & 3) << np.uint8(4))).reshape(*lead, 8, 32)


def test_k_quants_keep_the_file_values_and_codes():
    # Q4_K/Q5_K/Q6_K are regrouped losslessly: the same values, codes and fp16 super-scales
    # for every output of a ragged last group
    n, k = 11, 512
    for qtype in (QT.Q4_K, QT.Q5_K, QT.Q6_K):
        raw = random_raw(qtype, n, k)
        p = Q.pack_gguf(qtype, raw, n, k)
        blk = raw.reshape(n, 2, -1)
        if qtype == QT.Q6_K:
            vals = k6_values(blk[..., 0:128], blk[..., 128:192]).astype(np.int16) - 32
        else:
            vals = k_low_nibbles(blk[..., -128:]).astype(np.int16)
            if qtype == QT.Q5_K:
                vals |= ((blk[..., None, 16:48] >> np.arange(8, dtype=np.uint8)[:, None]) & 1).astype(np.int16) << 4
        assert np.array_equal(Q.values(p), vals.reshape(n, k // 32, 32)), qtype.name
        if qtype == QT.Q6_K:
            codes = blk[..., 192:208].view(np.int8).astype(np.float32)
            d = blk[..., 208:210].copy().view(np.float16)[..., 0].astype(np.float32)
            want_s = np.repeat(d, 16, axis=-1).reshape(n, 2, 16) * codes
            got_s = Q.scales(p).transpose(0, 2, 1).reshape(n, 2, 16)
            assert np.array_equal(got_s, want_s)
        else:
            d = blk[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
            sc, _ = k_scales(blk[..., 4:16])
            assert np.array_equal(Q.scales(p)[:, 0].reshape(n, 2, 8), d[..., None] * sc)


def test_q6_k_values_range():
    p = Q.pack_gguf(QT.Q6_K, random_raw(QT.Q6_K, 2, 256), 2, 256)
    v = Q.values(p)
    assert v.min() == -32 and v.max() == 31


@pytest.mark.parametrize("qtype", [QT.Q5_K, QT.Q5_0, QT.Q5_1])
def test_five_bit_values_range(qtype):
    p = Q.pack_gguf(qtype, random_raw(qtype, 2, 256), 2, 256)
    v = Q.values(p) + (16 if qtype == QT.Q5_0 else 0)
    assert v.min() == 0 and v.max() == 31


def test_q4a_nibble_layout_hand_built():
    vals = np.arange(32, dtype=np.uint8) % 16  # element i -> i % 16
    vals[16:] = 15 - vals[16:]  # make the two halves distinguishable
    # Q4_0 block: fp16 d = 1.0, then the 16 bytes
    qs = (vals[:16] | (vals[16:] << 4)).astype(np.uint8)
    raw = np.concatenate([np.array([1.0], np.float16).view(np.uint8), qs])[None, :]
    p = Q.pack_gguf(QT.Q4_0, raw, 1, 32)
    assert np.array_equal(Q.values(p)[0, 0], vals.astype(np.int16) - 8)
    assert np.array_equal(Q.dequantize(p)[0], vals.astype(np.float32) - 8)
    # output t's bytes 4m..4m+3 sit at 64m + 4t in its group's record (t = 0 here)
    for m in range(4):
        assert np.array_equal(p.q[0, 64 * m:64 * m + 4], qs[4 * m:4 * m + 4])

    # the same nibbles with other scales, from the row-major form
    hand = Q.pack_q4a(1, 32, qs[None, :], np.array([[0.5]], np.float32), np.array([[1.0]], np.float32))
    assert np.array_equal(Q.dequantize(hand)[0], vals.astype(np.float32) * 0.5 + 1.0)


def test_q8_min_rule():
    q = np.arange(-16, 16, dtype=np.int8)[None, :]
    mn = Q.pack_q8(1, 32, Q.HAS_MIN, q, [np.array([[2.0]], np.float32), np.array([[-1.5]], np.float32)])
    assert np.array_equal(Q.dequantize(mn)[0], q[0] * np.float32(2) - np.float32(1.5))


def test_repack_of_gguf_quantizer_output():
    # blocks written by gguf's own quantizer (not random bytes) repack exactly;
    # checks that pack_gguf reads what a real writer produces.
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 128)).astype(np.float32)
    for qtype in (QT.Q8_0, QT.Q4_0, QT.Q4_1):
        raw = gq.quantize(w, qtype)
        got = Q.dequantize(Q.pack_gguf(qtype, raw, 4, 128))
        ref = gq.dequantize(raw, qtype).reshape(4, 128)
        assert np.array_equal(bits(got), bits(ref))


# ------------------------------------------------------------------ floats


@pytest.mark.parametrize("qtype", [QT.F32, QT.F16, QT.BF16])
def test_float_tensors_use_default_kind(qtype):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 64)).astype(np.float32)
    if qtype == QT.F16:
        data = w.astype(np.float16)
        src = data.astype(np.float32)
    elif qtype == QT.BF16:  # GGUFReader gives raw bytes [n, 2k] for BF16
        bf = Q.quantize_float(w, "bf16").q
        data = bf.view(np.uint8).reshape(3, 128)
        src = Q.dequantize(Q.quantize_float(w, "bf16"))
    else:
        data, src = w, w
    p = Q.pack_gguf(qtype, data, 3, 64)
    assert Q.DEFAULT_FLOAT_KIND == "q8_0"
    want = Q.quantize_float(src, Q.DEFAULT_FLOAT_KIND)
    assert (p.fmt, p.flags) == (Q.FMT_Q8, 0)
    assert np.array_equal(p.q, want.q) and np.array_equal(p.s, want.s)


def _blocks(w):
    return w.reshape(w.shape[0], -1, 32)


def test_quantize_q8_0_error_bound():
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((8, 256)) * rng.uniform(0.01, 10, (8, 1))).astype(np.float32)
    w[0, :32] = 0.0  # an all-zero block
    p = Q.quantize_float(w, "q8_0")
    assert (p.fmt, p.flags, Q.scales(p).shape) == (Q.FMT_Q8, 0, (8, 1, 8))
    d = Q.scales(p)[:, 0]
    assert np.array_equal(d, np.abs(_blocks(w)).max(-1) / np.float32(127))
    err = np.abs(_blocks(Q.dequantize(p) - w))
    assert np.all(err <= d[..., None] * (0.5 + 1e-5) + 1e-30)
    assert np.all(Q.dequantize(p)[0, :32] == 0) and np.all(Q.values(p)[0, 0] == 0)
    assert np.abs(Q.values(p)).max() <= 127


def test_quantize_q8_0_round_half_even():
    w = np.zeros((1, 32), np.float32)
    w[0, 0] = 127.0  # d = 1
    w[0, 1:5] = [0.5, 1.5, 2.5, -0.5]
    p = Q.quantize_float(w, "q8_0")
    assert Q.scales(p)[0, 0, 0] == 1.0
    assert Q.values(p)[0, 0, :5].tolist() == [127, 0, 2, 2, 0]


def test_quantize_q4_0_error_bound():
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((8, 256)) * rng.uniform(0.01, 10, (8, 1))).astype(np.float32)
    w[1, 32:64] = 0.0
    p = Q.quantize_float(w, "q4_0")
    assert (p.fmt, p.flags, Q.scales(p).shape) == (Q.FMT_Q4A, 0, (8, 1, 8))
    d = Q.scales(p)[:, 0]
    back = Q.dequantize(p)
    err = np.abs(_blocks(back - w))
    assert np.all(err <= np.abs(d)[..., None] * (1 + 1e-5) + 1e-30)
    assert np.all(back[1, 32:64] == 0)
    # the largest-magnitude element of each block is reproduced exactly
    imax = np.abs(_blocks(w)).argmax(-1)[..., None]
    assert np.array_equal(np.take_along_axis(_blocks(back), imax, -1),
                          np.take_along_axis(_blocks(w), imax, -1))


def test_quantize_q4_0_matches_gguf_nibbles():
    # gguf's own Q4_0 quantizer uses the same rule (fp16 d aside); with d exactly
    # representable in fp16 the nibbles must agree.
    rng = np.random.default_rng(4)
    w = rng.integers(-8, 8, size=(2, 64)).astype(np.float32) * np.float32(0.25)
    w[:, ::32] = -2.0  # vmax = -2 -> d = 0.25 (exact in fp16)
    p = Q.quantize_float(w, "q4_0")
    raw = gq.quantize(w, QT.Q4_0).reshape(2, 2, 18)[..., 2:]
    assert np.array_equal(Q.values(p), np.concatenate([raw & 0x0F, raw >> 4], axis=-1).astype(np.int16) - 8)


def test_quantize_bf16():
    rng = np.random.default_rng(5)
    bf_bits = rng.integers(0, 1 << 16, size=(4, 64), dtype=np.uint32).astype(np.uint16)
    bf_bits[(bf_bits & 0x7F80) == 0x7F80] = 0x3F80  # no inf/NaN here
    w = (bf_bits.astype(np.uint32) << 16).view(np.float32)
    p = Q.quantize_float(w, "bf16")
    assert p.fmt == Q.FMT_BF16 and p.q.dtype == np.uint16 and p.s.size == 0
    assert np.array_equal(p.q, bf_bits)  # values already bf16: exact
    assert np.array_equal(Q.dequantize(p).view(np.uint32), w.view(np.uint32))

    # round to nearest even, inf kept, NaN stays NaN
    x = np.zeros((1, 32), np.float32)
    x[0, :6] = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF,
                         0x7F800000, 0xFFC00001], np.uint32).view(np.float32)
    q = Q.quantize_float(x, "bf16").q[0, :6]
    assert q[:5].tolist() == [0x3F80, 0x3F82, 0x3F81, 0x7F80, 0x7F80]
    assert np.isnan(Q.dequantize(Q.quantize_float(x, "bf16"))[0, 5])
    # matches gguf's bf16 conversion on random floats
    y = rng.standard_normal((4, 64)).astype(np.float32)
    ref = gq.quantize(y, QT.BF16).view(np.uint16).reshape(4, 64)
    assert np.array_equal(Q.quantize_float(y, "bf16").q, ref)


# ------------------------------------------------------------------ errors


def test_unsupported_type_raises():
    with pytest.raises(ValueError, match="Q2_K.*not supported.*Q4_0, Q4_1, Q5_0, Q5_1, Q8_0"):
        Q.pack_gguf(QT.Q2_K, np.zeros((1, 84), np.uint8), 1, 256)
    with pytest.raises(ValueError, match="not supported"):
        Q.pack_gguf(QT.IQ4_XS, np.zeros((1, 136), np.uint8), 1, 256)


@pytest.mark.parametrize("qtype,k", [(QT.Q4_0, 48), (QT.Q8_0, 40), (QT.Q4_K, 128),
                                     (QT.Q5_K, 288), (QT.Q6_K, 32), (QT.F32, 40)])
def test_bad_k_raises(qtype, k):
    bs, ts = GGML_QUANT_SIZES[qtype]
    width = max(1, k * ts // bs)
    data = np.zeros((2, k), np.float32) if qtype == QT.F32 else np.zeros((2, width), np.uint8)
    with pytest.raises(ValueError, match="multiple of"):
        Q.pack_gguf(qtype, data, 2, k)


def test_wrong_data_size_and_bad_kind_raise():
    with pytest.raises(ValueError):
        Q.pack_gguf(QT.Q8_0, np.zeros((2, 33), np.uint8), 2, 32)
    with pytest.raises(ValueError, match="kind"):
        Q.quantize_float(np.zeros((1, 32), np.float32), "q5_1")


# ------------------------------------------------------------------ the kernels on compact layouts


def _weight(p: Q.Packed):
    from tensorfold.native import lib

    return lib.Weight(p.fmt, p.flags, p.n, p.k, p.q.ctypes.data, p.s.ctypes.data if p.s.size else None, None)


def _linear(L, p: Q.Packed, x: np.ndarray) -> np.ndarray:
    from tensorfold.native import lib

    y = np.full((x.shape[0], p.n), np.nan, np.float32)
    w = _weight(p)
    assert L.tf_linear(C.byref(w), lib.ptr(x), x.shape[0], lib.ptr(y)) == 0
    return y


def _acts(rows: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, k)) * 10.0 ** rng.uniform(-2, 2, (rows, 1))).astype(np.float32)
    x[0, 32:64] = 0  # an all-zero block
    return x


def _all_fp16_q8_0(n: int, k: int) -> np.ndarray:
    """Q8_0 blocks whose scales run through every finite fp16 value (subnormals, zeros, both signs)."""
    raw = random_raw(QT.Q8_0, n, k, seed=9).reshape(n, k // 32, 34)
    h = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16)
    h = h[np.isfinite(h.view(np.float16))]
    raw[..., 0:2] = np.resize(h, raw.shape[:2])[..., None].view(np.uint8)
    return raw.reshape(n, -1)


COMPACT_CASES = [(qt, 13, k) for qt in BLOCK_LAYOUTS for k in (256, 512)] + [
    (QT.Q5_0, 11, 896), (QT.Q4_0, 9, 96), (QT.Q8_0, 7, 224), (QT.Q5_1, 6, 64)]   # nb not a multiple of 8


@pytest.mark.parametrize("qtype,n,k", COMPACT_CASES, ids=[f"{q.name}-{n}x{k}" for q, n, k in COMPACT_CASES])
def test_kernel_compact_equals_float32_planes(qtype, n, k):
    """tf_linear on a compact weight gives the same bits as on the same weight with
    today's float32 planes (and Q8 in place of the fifth-bit plane), on every ISA."""
    from tensorfold.native import lib

    L = lib.load()
    p = Q.pack_gguf(qtype, random_raw(qtype, n, k, seed=n * k + int(qtype)), n, k)
    e = Q.expand(p)
    assert p.flags & (Q.HALF | Q.HIGH)
    isas = [i for i in (0, 1, 2, 3) if L.tf_set_isa(i) == i]
    try:
        for isa in isas:
            assert L.tf_set_isa(isa) == isa
            for rows in (1, 2, 3, 4, 5, 9):
                x = _acts(rows, k, seed=rows)
                got, want = _linear(L, p, x), _linear(L, e, x)
                assert np.all(np.isfinite(want))
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"isa {isa} rows {rows}"
        # and every ISA agrees with the scalar reference
        x = _acts(5, k, seed=3)
        L.tf_set_isa(0)
        ref = _linear(L, p, x)
        for isa in isas:
            L.tf_set_isa(isa)
            assert np.array_equal(_linear(L, p, x).view(np.uint32), ref.view(np.uint32)), f"isa {isa}"
    finally:
        L.tf_set_isa(-1)


def test_kernel_half_scales_every_fp16_value():
    from tensorfold.native import lib

    L = lib.load()
    n, k = 40, 1600           # 2000 blocks x 33 rows: every finite fp16 as a scale
    p = Q.pack_gguf(QT.Q8_0, _all_fp16_q8_0(n, k), n, k)
    assert p.flags == Q.HALF
    e = Q.expand(p)
    x = _acts(3, k, seed=1) * np.float32(1e-3)   # keep the products of the largest scales finite
    isas = [i for i in (0, 1, 2, 3) if L.tf_set_isa(i) == i]
    try:
        for isa in isas:
            L.tf_set_isa(isa)
            got, want = _linear(L, p, x), _linear(L, e, x)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"isa {isa}"
    finally:
        L.tf_set_isa(-1)


@pytest.mark.parametrize("qtype", list(LAYOUTS))
def test_dequant_row_compact_matches_reference(qtype):
    from tensorfold.native import lib

    L = lib.load()
    n, k = 5, 512
    p = Q.pack_gguf(qtype, random_raw(qtype, n, k, seed=4), n, k)
    ref = Q.dequantize(p)
    w = _weight(p)
    out = np.empty(k, np.float32)
    for r in range(n):
        L.tf_dequant_row(C.byref(w), r, lib.ptr(out))
        assert np.array_equal(out.view(np.uint32), ref[r].view(np.uint32)), f"row {r}"


def _gguf_data(qtype, n, k, seed):
    """A tensor as GGUFReader gives it: raw blocks, or floats (BF16: raw bytes [n, 2k])."""
    if qtype in FP16_FIELDS:
        return random_raw(qtype, n, k, seed=seed)
    w = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32)
    if qtype == QT.BF16:
        return Q.quantize_float(w, "bf16").q.view(np.uint8).reshape(n, 2 * k)
    return w.astype(np.float16) if qtype == QT.F16 else w


@pytest.mark.parametrize("qtype", [*FP16_FIELDS, QT.F32, QT.F16, QT.BF16])
def test_packed_into_an_arena_is_the_same_and_within_its_bound(qtype):
    """A GGUF's weights are packed into one map (model.Arena) sized by packed_bound: the
    same arrays as packed alone, each on a 64-byte boundary, and the bound holds for
    ragged output counts and for Q4A/Q8 scales kept float32 (a NaN scale)."""
    from tensorfold.native.model import Arena

    k = 512
    for n in (1, 37, 64):
        data = _gguf_data(qtype, n, k, seed=n)
        if qtype in (QT.Q4_1, QT.Q8_0):                # a NaN d: that weight's scales stay float32
            data[0, :2] = np.array([np.nan], np.float16).view(np.uint8)
        alone = Q.pack_gguf(qtype, data, n, k)
        arena = Arena(Q.packed_bound(qtype, n, k), huge=False)
        packed = Q.pack_gguf(qtype, data, n, k, into=arena)
        assert (packed.fmt, packed.flags) == (alone.fmt, alone.flags)
        assert np.array_equal(packed.q, alone.q) and np.array_equal(packed.s, alone.s)
        assert packed.q.ctypes.data % 64 == 0 and packed.s.ctypes.data % 64 == 0
        assert arena.used <= len(arena.map)
        if qtype in (QT.Q4_1, QT.Q8_0):
            assert not packed.flags & Q.HALF


def test_an_arena_refuses_past_its_size():
    from tensorfold.native.model import Arena

    arena = Arena(4096, huge=False)
    arena.zeros((32, 64))
    with pytest.raises(RuntimeError, match="too small"):
        arena.zeros((64, 64))
