"""Weight layouts read by the C kernels, and conversion into them.

Every layout is row-major: ``n`` rows (output features) of ``k`` columns
(input features), ``k`` a multiple of 32.  Quantized rows are cut into blocks
of 32 input elements; ``s`` holds float32 scales ``[n, S, k // 32]`` (each
kind of scale in a row of its own, so the kernels load eight blocks' at once).

FMT_Q4A (4-bit affine), ``q`` uint8 ``[n, k // 2]``, S = 2 (d, m):
    16 bytes per block; byte i holds element i in its low nibble and element
    i + 16 in its high nibble.  value = float32(q) * d + m  (q in 0..15; a
    float32 multiply, then a float32 add).

FMT_Q8, ``q`` int8 ``[n, k]``, S = 1 + TWO_SCALES + HAS_MIN, scales (d0[, d1][, m]):
    value = float32(q) * d, with d = d0 for elements 0..15 of a block and d1
    for elements 16..31 when the TWO_SCALES flag is set (else d0 throughout);
    then ``+ m`` (float32 add) when HAS_MIN is set.

FMT_BF16, ``q`` uint16 ``[n, k]`` bf16 bit patterns, ``s`` empty float32.

``pack_gguf`` repacks GGUF tensors losslessly (Q4_0, Q4_1, Q4_K -> Q4A;
Q8_0, Q5_0, Q5_1, Q5_K, Q6_K -> Q8; float tensors are quantized with ``quantize_float``).
``dequantize`` is the float32 reference the C kernels are tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES

FMT_Q4A, FMT_Q8, FMT_BF16 = 1, 2, 3
TWO_SCALES, HAS_MIN = 1, 2  # flags for FMT_Q8

DEFAULT_FLOAT_KIND = "q8_0"
FLOAT_KINDS = ("q8_0", "q4_0", "bf16")

_F32 = np.float32
_SUPPORTED = "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, F32, F16, BF16"


@dataclass
class Packed:
    fmt: int
    flags: int
    n: int  # rows (output features)
    k: int  # columns (input features), a multiple of 32
    q: np.ndarray  # Q4A: uint8 [n, k//2]; Q8: int8 [n, k]; BF16: uint16 [n, k]
    s: np.ndarray  # float32 [n, S, k//32]; empty for BF16


def nbytes(p: Packed) -> int:
    return int(p.q.nbytes + p.s.nbytes)


# --------------------------------------------------------------------------- helpers


def _f16(b: np.ndarray) -> np.ndarray:
    """uint8 [..., 2] little-endian fp16 -> float32 [...] (exact)."""
    return np.ascontiguousarray(b).view(np.float16)[..., 0].astype(_F32)


def _nibbles_to_q4a(v: np.ndarray) -> np.ndarray:
    """uint8 values 0..15 [..., 32] -> Q4A bytes [..., 16]."""
    return v[..., :16] | (v[..., 16:] << np.uint8(4))


def _q4a(n: int, k: int, qbytes: np.ndarray, d: np.ndarray, m: np.ndarray) -> Packed:
    q = np.ascontiguousarray(qbytes, dtype=np.uint8).reshape(n, k // 2)
    s = np.ascontiguousarray(np.stack([d.reshape(n, -1), m.reshape(n, -1)], axis=1), dtype=_F32)
    return Packed(FMT_Q4A, 0, n, k, q, s)


def _q8(n: int, k: int, flags: int, qvals: np.ndarray, scales: list[np.ndarray]) -> Packed:
    q = np.ascontiguousarray(qvals, dtype=np.int8).reshape(n, k)
    s = np.ascontiguousarray(np.stack([x.reshape(n, -1) for x in scales], axis=1), dtype=_F32)
    return Packed(FMT_Q8, flags, n, k, q, s)


def _k_scales(sb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K 12-byte packed 6-bit scales/mins [..., 12] -> (sc, mn) uint8 [..., 8].

    Sub-blocks 0..3: scale = low 6 bits of bytes 0..3, min = low 6 bits of bytes 4..7.
    Sub-blocks 4..7: low 4 bits from bytes 8..11 (scale: low nibble, min: high
    nibble), top 2 bits from the top 2 bits of bytes 0..3 (scale) / 4..7 (min).
    """
    a, b, c = sb[..., 0:4], sb[..., 4:8], sb[..., 8:12]
    sc = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 2) & 0x30)], axis=-1)
    return sc, mn


def _k_d_m(blk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-32 (d, m) of a Q4_K/Q5_K super-block [..., bytes] -> float32 [..., 8] each."""
    d, dmin = _f16(blk[..., 0:2]), _f16(blk[..., 2:4])
    sc, mn = _k_scales(blk[..., 4:16])
    return d[..., None] * sc.astype(_F32), -(dmin[..., None] * mn.astype(_F32))


def _k_low_nibbles(qs: np.ndarray) -> np.ndarray:
    """K-quant 128 nibble bytes [..., 128] -> values [..., 8, 32].

    Sub-block 2j holds the low nibbles of bytes 32j..32j+31, sub-block 2j+1
    their high nibbles.
    """
    g = qs.reshape(*qs.shape[:-1], 4, 1, 32)
    return np.concatenate([g & 0x0F, g >> 4], axis=-2).reshape(*qs.shape[:-1], 8, 32)


# --------------------------------------------------------------------------- GGUF


def pack_gguf(qtype, data: np.ndarray, n: int, k: int) -> Packed:
    """Repack a 2-D GGUF tensor (as ``GGUFReader`` gives ``tensor.data``) losslessly."""
    try:
        qt = QT(qtype)
    except ValueError:
        raise ValueError(f"GGML type {qtype!r} is not supported; supported: {_SUPPORTED}") from None
    n, k = int(n), int(k)
    if qt in (QT.F32, QT.F16, QT.BF16):
        if k <= 0 or k % 32:
            raise ValueError(f"k={k} is not a positive multiple of 32")
        if qt == QT.BF16 and data.dtype in (np.uint8, np.uint16, np.int16):
            bits = np.ascontiguousarray(data).view(np.uint16).astype(np.uint32) << np.uint32(16)
            w = bits.view(_F32)
        else:
            w = np.asarray(data, _F32)
        if w.size != n * k:
            raise ValueError(f"{qt.name} data has {w.size} elements, expected {n}x{k}")
        return quantize_float(w.reshape(n, k), DEFAULT_FLOAT_KIND)

    handler = _GGUF_HANDLERS.get(qt)
    if handler is None:
        raise ValueError(f"GGML type {qt.name} is not supported; supported: {_SUPPORTED}")
    bs, ts = GGML_QUANT_SIZES[qt]
    if k <= 0 or k % 32 or k % bs:
        raise ValueError(f"k={k} is not a positive multiple of {max(bs, 32)} (needed for {qt.name})")
    raw = np.ascontiguousarray(data).view(np.uint8)
    if raw.size != n * (k // bs) * ts:
        raise ValueError(f"{qt.name} data has {raw.size} bytes, expected {n * (k // bs) * ts} for {n}x{k}")
    return handler(raw.reshape(n, k // bs, ts), n, k)


def _from_q4_0(blk, n, k):  # block: fp16 d, 16 bytes nibbles (already the Q4A order)
    d = _f16(blk[..., 0:2])
    return _q4a(n, k, blk[..., 2:], d, d * _F32(-8))


def _from_q4_1(blk, n, k):  # block: fp16 d, fp16 m, 16 bytes nibbles
    return _q4a(n, k, blk[..., 4:], _f16(blk[..., 0:2]), _f16(blk[..., 2:4]))


def _from_q8_0(blk, n, k):  # block: fp16 d, 32 int8
    return _q8(n, k, 0, blk[..., 2:].view(np.int8), [_f16(blk[..., 0:2])])


def _from_q4_k(blk, n, k):  # 144 bytes: d, dmin, 12 scale bytes, 128 nibble bytes
    d, m = _k_d_m(blk)
    return _q4a(n, k, _nibbles_to_q4a(_k_low_nibbles(blk[..., 16:144])), d, m)


def _from_q5_k(blk, n, k):  # 176 bytes: d, dmin, 12 scale bytes, 32 qh bytes, 128 ql bytes
    d, m = _k_d_m(blk)
    lo = _k_low_nibbles(blk[..., 48:176])
    # bit j of qh byte e is bit 4 of element e of sub-block j
    qh = blk[..., 16:48][..., None, :] >> np.arange(8, dtype=np.uint8)[:, None]
    q = lo | ((qh & 1) << np.uint8(4))
    return _q8(n, k, HAS_MIN, q.view(np.int8), [d, m])


def _from_q6_k(blk, n, k):  # 210 bytes: 128 ql, 64 qh, 16 int8 scales, fp16 d
    lead = blk.shape[:-1]
    # Each 128-element half h uses ql[64h:64h+64] and qh[32h:32h+32]; its four
    # 32-element chunks t take low nibbles of ql bytes 0..31 / 32..63, then high
    # nibbles of bytes 0..31 / 32..63, and bits 2t..2t+1 of the qh bytes.
    ql = blk[..., 0:128].reshape(*lead, 2, 1, 2, 32)
    ql = np.concatenate([ql & 0x0F, ql >> 4], axis=-3)  # [..., 2, 4, 32]
    qh = blk[..., 128:192].reshape(*lead, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8)[:, None]
    q = (ql.reshape(*lead, 2, 4, 32) | ((qh & 3) << np.uint8(4))).astype(np.int8) - np.int8(32)
    sc = blk[..., 192:208].view(np.int8).astype(_F32).reshape(*lead, 8, 2)
    ds = _f16(blk[..., 208:210])[..., None, None] * sc
    return _q8(n, k, TWO_SCALES, q, [ds[..., 0], ds[..., 1]])


def _q5_values(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1: 4 qh bytes (bit e: bit 4 of element e) and 16 nibble bytes -> values [..., 32]."""
    bits = (qh.copy().view(np.uint32)[..., 0:1] >> np.arange(32, dtype=np.uint32)) & 1
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1) | (bits.astype(np.uint8) << np.uint8(4))


def _from_q5_0(blk, n, k):  # block: fp16 d, 4 bytes qh, 16 nibble bytes; value = d * (q - 16)
    d = _f16(blk[..., 0:2])
    return _q8(n, k, HAS_MIN, _q5_values(blk[..., 2:6], blk[..., 6:22]).view(np.int8), [d, d * _F32(-16)])


def _from_q5_1(blk, n, k):  # block: fp16 d, fp16 m, 4 bytes qh, 16 nibble bytes; value = d * q + m
    q = _q5_values(blk[..., 4:8], blk[..., 8:24]).view(np.int8)
    return _q8(n, k, HAS_MIN, q, [_f16(blk[..., 0:2]), _f16(blk[..., 2:4])])


_GGUF_HANDLERS = {
    QT.Q5_0: _from_q5_0,
    QT.Q5_1: _from_q5_1,
    QT.Q4_0: _from_q4_0,
    QT.Q4_1: _from_q4_1,
    QT.Q8_0: _from_q8_0,
    QT.Q4_K: _from_q4_k,
    QT.Q5_K: _from_q5_k,
    QT.Q6_K: _from_q6_k,
}


# --------------------------------------------------------------------------- floats


def quantize_float(w: np.ndarray, kind: str) -> Packed:
    """Quantize float32 weights [n, k] to ``kind`` in {"q8_0", "q4_0", "bf16"}."""
    if kind not in FLOAT_KINDS:
        raise ValueError(f"unknown float kind {kind!r}; expected one of {FLOAT_KINDS}")
    w = np.ascontiguousarray(w, dtype=_F32)
    if w.ndim != 2 or w.shape[1] % 32 or w.shape[1] == 0:
        raise ValueError(f"expected [n, k] with k a positive multiple of 32, got shape {w.shape}")
    n, k = w.shape
    if kind == "bf16":
        bits = w.view(np.uint32)
        rounded = (bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> np.uint32(16)
        quiet_nan = (bits >> np.uint32(16)) | np.uint32(0x40)
        out = np.where(np.isnan(w), quiet_nan, rounded).astype(np.uint16)
        return Packed(FMT_BF16, 0, n, k, out, np.empty(0, _F32))

    b = w.reshape(n, k // 32, 32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if kind == "q8_0":
            d = np.abs(b).max(axis=-1) / _F32(127)
            inv = np.where(d == 0, _F32(0), _F32(1) / d).astype(_F32)
            q = np.clip(np.rint(b * inv[..., None]), -127, 127).astype(np.int8)
            return _q8(n, k, 0, q, [d])
        # q4_0
        imax = np.abs(b).argmax(axis=-1)[..., None]
        vmax = np.take_along_axis(b, imax, axis=-1)[..., 0]
        d = vmax / _F32(-8)
        inv = np.where(d == 0, _F32(0), _F32(1) / d).astype(_F32)
        q = np.clip(np.floor(b * inv[..., None] + _F32(8.5)), 0, 15).astype(np.uint8)
        return _q4a(n, k, _nibbles_to_q4a(q), d, d * _F32(-8))


# --------------------------------------------------------------------------- reference


def dequantize(p: Packed) -> np.ndarray:
    """float32 [n, k] values of ``p``, computed exactly as the layout rules say."""
    n, k = p.n, p.k
    if p.fmt == FMT_BF16:
        return (p.q.astype(np.uint32) << np.uint32(16)).view(_F32).reshape(n, k)
    s = p.s.transpose(0, 2, 1)                     # [n, nb, S]
    if p.fmt == FMT_Q4A:
        qb = p.q.reshape(n, k // 32, 16)
        v = np.concatenate([qb & 0x0F, qb >> 4], axis=-1).astype(_F32)
        return (v * s[..., 0:1] + s[..., 1:2]).reshape(n, k)
    if p.fmt == FMT_Q8:
        v = p.q.reshape(n, k // 32, 32).astype(_F32)
        if p.flags & TWO_SCALES:
            d = np.repeat(s[..., 0:2], 16, axis=-1)
        else:
            d = s[..., 0:1]
        out = v * d
        if p.flags & HAS_MIN:
            out += s[..., -1:]
        return out.reshape(n, k)
    raise ValueError(f"unknown packed format {p.fmt}")
