"""Weight layouts read by the C kernels, and conversion into them.

Every weight has ``n`` outputs (rows) of ``k`` inputs (columns), ``k`` a
multiple of 32, cut into blocks of 32 inputs (nb = k // 32).

FMT_Q4A (4-bit affine) and FMT_Q8 are built from a row-major form (what
``pack_q4a`` and ``pack_q8`` take), then regrouped by sixteen outputs (``tf_bpack``):
    FMT_Q4A: 16 bytes per block, byte i holds element i in its low nibble and
    element i + 16 in its high nibble, S = 1 + HAS_MIN scales per block (d[, m]);
    value = float32(q) * d, then ``+ m`` (float32 add) when HAS_MIN is set.  The
    stored u is the nibble (0..15), or with the HIGH flag nibble | bit << 4 (0..31),
    4 bytes per block of fifth bits (bit e % 8 of byte e // 8 is bit 4 of element
    e); q = u with HAS_MIN, else u - 8 (HIGH: u - 16), GGUF's Q4_0 and Q5_0.
    FMT_Q8: int8 q, S = 1 + HAS_MIN scales (d[, m]); value = float32(q) * d, then
    ``+ m`` (float32 add) when HAS_MIN is set.
The grouped layout (tf_kernels.h has the byte order): ``q`` uint8 ``[G, nb *
bits]`` one record per (group, block) (Q4A 256 bytes, with HIGH 320, Q8 512:
sixteen outputs' four inputs side by side in each 64 bytes) and ``s`` uint8 ``[G,
nb * S * 16 * size]`` their scales, float32 or, with the HALF flag, float16
(widened exactly: no computed bit depends on the encoding).  The last group is
padded with zero outputs.

FMT_BF16, ``q`` uint16 ``[n, k]`` bf16 bit patterns, ``s`` empty float32.

FMT_K4, FMT_K5, FMT_K6 (GGUF's Q4_K, Q5_K, Q6_K; k a multiple of 256, nsb =
k // 256): the file's super-blocks regrouped by eight outputs (the last group
padded with zero outputs), ``q`` uint8 ``[G, nsb * bits]`` the values (K4 1024
bytes per group and super-block, K5 1280, K6 1536: eight outputs' 8 inputs side
by side in each 64 bytes) and ``s`` uint8 ``[G, nsb * meta]`` the scales (K4/K5:
fp16 d, dmin and the 6-bit codes sc, mn packed as the file packs them, 128; K6: fp16 d, the int8
codes and each output's int32 sum of code * (q - 32), 176); tf_kernels.h has the
byte order.  The C packer (``tf_kpack``) writes them.  K4/K5: value = q * (d * sc) + (-dmin * mn); K6: value = (q - 32) *
(d * code), one int8 code per 16 inputs.  The kernels multiply the codes as
integers over whole super-blocks (tf_kernels.h, "K dot").

``pack_gguf`` repacks GGUF tensors losslessly; bytes per 32 weights (GGUF's own):
    Q4_0 -> Q4A HALF 18 (18)            Q4_1 -> Q4A HAS_MIN HALF 20 (20)
    Q5_0 -> Q4A HIGH HALF 22 (22)       Q5_1 -> Q4A HIGH HAS_MIN HALF 24 (24)
    Q8_0 -> Q8 HALF 34 (34)             Q4_K -> K4 18 (18)
    Q5_K -> K5 22 (22)                  Q6_K -> K6 26.75 (26.25)
Float tensors are quantized with ``quantize_float``, whose scales
(amax / 127) are not fp16 values: float32.  ``dequantize`` is the float32
reference the C kernels are tested against; ``expand`` gives a Q4A or Q8 weight
with float32 scales and no fifth-bit plane.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checkpoints.ggml_types import BLOCK_SIZES, GGMLType as QT

FMT_Q4A, FMT_Q8, FMT_BF16, FMT_K4, FMT_K5, FMT_K6 = 1, 2, 3, 4, 5, 6
K_FORMATS = (FMT_K4, FMT_K5, FMT_K6)
HAS_MIN = 2  # flag for FMT_Q4A and FMT_Q8: a min plane
HIGH = 4  # flag for FMT_Q4A: a fifth bit per element
HALF = 8  # scale encoding of FMT_Q4A and FMT_Q8

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
    q: np.ndarray  # Q4A, Q8, K: uint8 records [G, ...]; BF16: uint16 [n, k]
    s: np.ndarray  # Q4A, Q8, K: uint8 records [G, ...]; empty float32 for BF16


def nbytes(p: Packed) -> int:
    """Bytes the weight holds in memory: every array the kernels read."""
    return int(p.q.nbytes + p.s.nbytes)


def scales(p: Packed) -> np.ndarray:
    """The float32 scales [n, S, k//32] of the layout rules, decoded from any encoding."""
    return _k_scales_of(p) if p.fmt in K_FORMATS else _b_scales_of(p)


def values(p: Packed) -> np.ndarray:
    """The integer q of every element, int16 [n, k//32, 32] (Q4A, Q8, K: K6 with its -32)."""
    nb = p.k // 32
    if p.fmt in K_FORMATS:
        v = _k_values(p).astype(np.int16)
        return (v - 32 if p.fmt == FMT_K6 else v).reshape(p.n, nb, 32)
    return _b_values(p)


def expand(p: Packed) -> Packed:
    """The same Q4A or Q8 weight with float32 scales and no fifth-bit plane: a HIGH Q4A
    becomes Q8 (the same integers and scales, so the kernels give the same bits)."""
    if p.fmt not in (FMT_Q4A, FMT_Q8):
        raise ValueError("expand takes a Q4A or Q8 weight")
    s, v = scales(p), values(p)
    planes = [s[:, i] for i in range(s.shape[1])]
    if p.fmt == FMT_Q8 or p.flags & HIGH:
        return pack_q8(p.n, p.k, p.flags & HAS_MIN, v, planes)
    return pack_q4a(p.n, p.k, _nibbles_to_q4a((v + _q4a_offset(p.flags)).astype(np.uint8)), *planes)


# --------------------------------------------------------------------------- helpers


def _f16(b: np.ndarray) -> np.ndarray:
    """uint8 [..., 2] little-endian fp16 -> float32 [...] (exact)."""
    return np.ascontiguousarray(b).view(np.float16)[..., 0].astype(_F32)


def _q4a_offset(flags: int) -> int:
    """What a Q4A weight's stored values exceed its integers q by: 0 with a min plane."""
    return 0 if flags & HAS_MIN else 16 if flags & HIGH else 8


def _nibbles_to_q4a(v: np.ndarray) -> np.ndarray:
    """uint8 values 0..15 [..., 32] -> Q4A bytes [..., 16]."""
    return v[..., :16] | (v[..., 16:] << np.uint8(4))


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


def _stack(n: int, planes: list[np.ndarray], dtype) -> np.ndarray:
    return np.ascontiguousarray(np.stack([x.reshape(n, -1) for x in planes], axis=1), dtype=dtype)


def _planes(n: int, planes: list[np.ndarray], half: bool) -> tuple[int, np.ndarray]:
    """float32 scale planes -> (encoding, s): float16 when ``half`` and every value
    widens back to the same float32 bits (NaN excluded), else float32."""
    s = _stack(n, planes, _F32)
    if half and not np.isnan(s).any():
        with np.errstate(over="ignore"):
            h = s.astype(np.float16)
        if _same_bits(h.astype(_F32), s):
            return HALF, h
    return 0, s


def pack_q4a(n: int, k: int, qbytes: np.ndarray, d: np.ndarray, m: np.ndarray | None = None, half: bool = False,
             qh: np.ndarray | None = None, into=None) -> Packed:
    """Q4A from the row-major form: nibble bytes [n, k // 2], scales (no m: the fixed
    offset), fifth bits [n, k // 8]."""
    enc, s = _planes(n, [d] if m is None else [d, m], half)
    flags = enc | (HIGH if qh is not None else 0) | (0 if m is None else HAS_MIN)
    return _b_group(FMT_Q4A, flags, n, k, qbytes, s, qh, into)


def pack_q8(n: int, k: int, flags: int, qvals: np.ndarray, scales: list[np.ndarray], half: bool = False,
            into=None) -> Packed:
    """Q8 from the row-major form: int8 values [n, k] and scales."""
    enc, s = _planes(n, scales, half)
    return _b_group(FMT_Q8, flags | enc, n, k, np.asarray(qvals).astype(np.int8, copy=False), s, into=into)


B_BITS = {FMT_Q4A: 256, FMT_Q8: 512}  # bytes per group and block (Q4A with HIGH: + 64)


def _b_bits(fmt: int, flags: int) -> int:
    return B_BITS[fmt] + (64 if flags & HIGH else 0)


def _b_shapes(fmt: int, flags: int, n: int, k: int, scale_bytes: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The grouped Q4A/Q8 arrays' shapes (bits, scales), `scale_bytes` a block's scales
    of one output (planes x encoding size)."""
    groups, nb = -(-n // 16), k // 32
    return (groups, nb * _b_bits(fmt, flags)), (groups, nb * scale_bytes * 16)


def _b_group(fmt: int, flags: int, n: int, k: int, q: np.ndarray, s: np.ndarray,
             qh: np.ndarray | None = None, into=None) -> Packed:
    """The grouped Q4A/Q8 layout (tf_kernels.h) from the row-major form, by the C packer."""
    from . import lib

    nb = k // 32
    q = np.ascontiguousarray(q).reshape(n, -1)
    qh = None if qh is None else np.ascontiguousarray(qh, dtype=np.uint8).reshape(n, nb * 4)
    q_shape, s_shape = _b_shapes(fmt, flags, n, k, s.shape[1] * s.itemsize)
    oq, os_ = _zeros64(q_shape, into), _zeros64(s_shape, into)
    lib.load().tf_bpack(fmt, flags, n, k, q.ctypes.data, None if qh is None else qh.ctypes.data, s.ctypes.data,
                        oq.ctypes.data, os_.ctypes.data)
    return Packed(fmt, flags, n, k, oq, os_)


def _records(p: Packed, span: int) -> tuple[np.ndarray, np.ndarray]:
    """A grouped weight's records per (group, block of `span` inputs: 32, or 256 for the
    K formats), uint8 [G, k // span, bits], [G, k // span, scales]."""
    nb = p.k // span
    return p.q.reshape(-1, nb, p.q.shape[1] // nb), p.s.reshape(-1, nb, p.s.shape[1] // nb)


def _b_values(p: Packed) -> np.ndarray:
    """A Q4A/Q8 weight's integer values, int16 [n, nb, 32]."""
    bits = _records(p, 32)[0]
    G, nb = bits.shape[:2]
    if p.fmt == FMT_Q8:
        v = bits.view(np.int8).reshape(G, nb, 8, 16, 4).astype(np.int16)          # [G, b, j, t, i]
    else:
        nib = bits[..., :256].reshape(G, nb, 1, 4, 16, 4)
        v = np.concatenate([nib & 0x0F, nib >> 4], axis=2).reshape(G, nb, 8, 16, 4).astype(np.int16)
        if p.flags & HIGH:
            h = np.unpackbits(bits[..., 256:320, None], axis=-1, bitorder="little")      # [G, b, 4t + i, j]
            v |= h.swapaxes(-1, -2).reshape(G, nb, 8, 16, 4).astype(np.int16) << 4
        v -= _q4a_offset(p.flags)
    return _ungroup(v.transpose(0, 3, 1, 2, 4), p.n).reshape(p.n, nb, 32)           # element 4j + i


def _b_scales_of(p: Packed) -> np.ndarray:
    """A Q4A/Q8 weight's float32 scales [n, S, nb]."""
    meta = _records(p, 32)[1]
    G, nb = meta.shape[:2]
    f = np.ascontiguousarray(meta).view(np.float16 if p.flags & HALF else _F32).reshape(G, nb, -1, 16)
    return np.ascontiguousarray(_ungroup(f.transpose(0, 3, 2, 1), p.n), dtype=_F32)     # [G, t, S, b]


def _ungroup(a: np.ndarray, n: int) -> np.ndarray:
    """[G, size, ...] -> [n, ...]"""
    return a.reshape(-1, *a.shape[2:])[:n]


def _k_values(p: Packed) -> np.ndarray:
    """A K weight's unsigned values (K6: 0..63, before its -32), uint8 [n, nsb, 8, 32]."""
    bits = _records(p, 256)[0]
    G, nsb = bits.shape[:2]
    nib = bits[..., :1024].reshape(G, nsb, 4, 1, 4, 8, 8)                 # [G, j, pair, ., m, t, i]
    v = np.concatenate([nib & 0x0F, nib >> 4], axis=3).reshape(G, nsb, 8, 4, 8, 8)   # [G, j, b, m, t, i]
    high = bits[..., 1024:]
    if p.fmt == FMT_K5:
        h = high.reshape(G, nsb, 1, 4, 8, 8) >> np.arange(8, dtype=np.uint8)[:, None, None, None]
        v |= (h & 1) << np.uint8(4)
    elif p.fmt == FMT_K6:
        h = high.reshape(G, nsb, 2, 1, 4, 8, 8) >> (2 * np.arange(4, dtype=np.uint8))[:, None, None, None]
        v |= ((h & 3) << np.uint8(4)).reshape(G, nsb, 8, 4, 8, 8)
    v = v.reshape(G, nsb, 8, 4, 8, 2, 4)                                   # [G, j, b, m, t, h, i]
    return _ungroup(v.transpose(0, 4, 1, 2, 5, 3, 6), p.n).reshape(p.n, nsb, 8, 32)   # element 16h + 4m + i


K_RECORD = {FMT_K4: (1024, 128), FMT_K5: (1280, 128), FMT_K6: (1536, 176)}  # bytes per group and super-block


def _k_shapes(fmt: int, n: int, k: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The grouped K arrays' shapes (bits, scales)."""
    groups, nsb, (qb, mb) = -(-n // 8), k // 256, K_RECORD[fmt]
    return (groups, nsb * qb), (groups, nsb * mb)


def _zeros64(shape: tuple[int, int], into=None) -> np.ndarray:
    """Zeroed uint8 [shape] starting on a 64-byte boundary: the kernels load whole 64-byte
    vectors, and one that straddles two cache lines costs two loads.  `into`: an arena
    (model.Arena) to cut it from, else a heap array of its own."""
    if into is not None:
        return into.zeros(shape)
    size = shape[0] * shape[1]
    buf = np.zeros(size + 64, np.uint8)
    start = -buf.ctypes.data % 64
    return buf[start:start + size].reshape(shape)


def _k_group(fmt: int, blk: np.ndarray, n: int, k: int, into=None) -> Packed:
    """The grouped K layout (tf_kernels.h) of GGUF super-blocks [n, k // 256, bytes], by the C packer."""
    from . import lib

    q_shape, s_shape = _k_shapes(fmt, n, k)
    q, s = _zeros64(q_shape, into), _zeros64(s_shape, into)
    lib.load().tf_kpack(fmt, np.ascontiguousarray(blk).ctypes.data, n, k, q.ctypes.data, s.ctypes.data)
    return Packed(fmt, 0, n, k, q, s)


def _k_scales_of(p: Packed) -> np.ndarray:
    """A K weight's float32 scale planes [n, 2, nb]: K4/K5 d * sc and -dmin * mn per
    block; K6 d * code for inputs 0..15 and 16..31 of each block."""
    meta = _records(p, 256)[1]
    G, nsb = meta.shape[:2]
    out = lambda a: _ungroup(a.swapaxes(1, 2), p.n)                       # [G, j, t, ...] -> [n, j, ...]  # noqa: E731
    d = out(_f16(meta[..., 0:16].reshape(G, nsb, 8, 2)))[..., None]
    if p.fmt == FMT_K6:
        c = meta[..., 16:144].view(np.int8).reshape(G, nsb, 2, 8, 8).transpose(0, 4, 1, 3, 2)  # [G, t, j, b, h]
        c = _ungroup(c, p.n).astype(_F32)
        planes = [d * c[..., 0], d * c[..., 1]]
    else:
        dmin = out(_f16(meta[..., 16:32].reshape(G, nsb, 8, 2)))[..., None]
        lo, hi = meta[..., 32:96], meta[..., 96:128]
        top = lambda s: np.concatenate([hi >> s & 3, hi >> s + 2 & 3], axis=-1) << 4     # noqa: E731
        sc, mn = (lo & 15) | top(0), (lo >> 4) | top(4)                   # widened: a byte each
        sc = _ungroup(sc.reshape(G, nsb, 8, 8).transpose(0, 3, 1, 2), p.n)
        mn = _ungroup(mn.reshape(G, nsb, 4, 8, 2).transpose(0, 3, 1, 2, 4), p.n).reshape(p.n, nsb, 8)
        planes = [d * sc.astype(_F32), -dmin * mn.astype(_F32)]
    return _stack(p.n, planes, _F32)


# --------------------------------------------------------------------------- GGUF


def pack_gguf(qtype, data: np.ndarray, n: int, k: int, into=None) -> Packed:
    """Repack a 2-D GGUF tensor (as ``GGUFReader`` gives ``tensor.data``) losslessly; its
    arrays cut from the arena `into` (model.Arena) when given."""
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
        return quantize_float(w.reshape(n, k), DEFAULT_FLOAT_KIND, into)

    handler = _GGUF_HANDLERS.get(qt)
    if handler is None:
        raise ValueError(f"GGML type {qt.name} is not supported; supported: {_SUPPORTED}")
    bs, ts = BLOCK_SIZES[qt]
    if k <= 0 or k % 32 or k % bs:
        raise ValueError(f"k={k} is not a positive multiple of {max(bs, 32)} (needed for {qt.name})")
    raw = np.ascontiguousarray(data).view(np.uint8)
    if raw.size != n * (k // bs) * ts:
        raise ValueError(f"{qt.name} data has {raw.size} bytes, expected {n * (k // bs) * ts} for {n}x{k}")
    return handler(raw.reshape(n, k // bs, ts), n, k, into)


def _from_q4_0(blk, n, k, into):  # block: fp16 d, 16 bytes nibbles (already the Q4A order)
    return pack_q4a(n, k, blk[..., 2:], _f16(blk[..., 0:2]), half=True, into=into)


def _from_q4_1(blk, n, k, into):  # block: fp16 d, fp16 m, 16 bytes nibbles
    return pack_q4a(n, k, blk[..., 4:], _f16(blk[..., 0:2]), _f16(blk[..., 2:4]), half=True, into=into)


def _from_q5_0(blk, n, k, into):  # block: fp16 d, 4 bytes qh, 16 nibble bytes; value = d * (q - 16)
    # qh is a little-endian uint32 whose bit e is bit 4 of element e: already the HIGH layout
    return pack_q4a(n, k, blk[..., 6:22], _f16(blk[..., 0:2]), half=True, qh=blk[..., 2:6], into=into)


def _from_q5_1(blk, n, k, into):  # block: fp16 d, fp16 m, 4 bytes qh, 16 nibble bytes; value = d * q + m
    return pack_q4a(n, k, blk[..., 8:24], _f16(blk[..., 0:2]), _f16(blk[..., 2:4]), half=True, qh=blk[..., 4:8],
                    into=into)


def _from_q8_0(blk, n, k, into):  # block: fp16 d, 32 int8
    return pack_q8(n, k, 0, blk[..., 2:].view(np.int8), [_f16(blk[..., 0:2])], half=True, into=into)


_GGUF_HANDLERS = {
    QT.Q5_0: _from_q5_0,
    QT.Q5_1: _from_q5_1,
    QT.Q4_0: _from_q4_0,
    QT.Q4_1: _from_q4_1,
    QT.Q8_0: _from_q8_0,
    QT.Q4_K: lambda blk, n, k, into: _k_group(FMT_K4, blk, n, k, into),
    QT.Q5_K: lambda blk, n, k, into: _k_group(FMT_K5, blk, n, k, into),
    QT.Q6_K: lambda blk, n, k, into: _k_group(FMT_K6, blk, n, k, into),
}
# the layout (format, flags) pack_gguf gives each type, Q4A/Q8 scales as float32 (the
# wider encoding, taken where a scale is NaN); float types are quantized to q8_0
_GGUF_LAYOUT = {QT.Q4_0: (FMT_Q4A, 0), QT.Q4_1: (FMT_Q4A, HAS_MIN), QT.Q5_0: (FMT_Q4A, HIGH),
                QT.Q5_1: (FMT_Q4A, HIGH | HAS_MIN), QT.Q8_0: (FMT_Q8, 0), QT.Q4_K: (FMT_K4, 0),
                QT.Q5_K: (FMT_K5, 0), QT.Q6_K: (FMT_K6, 0)}


def packed_bound(qtype, n: int, k: int) -> int:
    """The most bytes pack_gguf's two arrays take for an [n, k] tensor of `qtype`, each from
    a 64-byte boundary (the size of an arena (model.Arena) that a GGUF's weights fill)."""
    fmt, flags = _GGUF_LAYOUT.get(QT(qtype), (FMT_Q8, 0))
    shapes = _k_shapes(fmt, n, k) if fmt in K_FORMATS else \
        _b_shapes(fmt, flags, n, k, (2 if flags & HAS_MIN else 1) * 4)
    return sum(rows * cols + 64 for rows, cols in shapes)


# --------------------------------------------------------------------------- floats


def quantize_float(w: np.ndarray, kind: str, into=None) -> Packed:
    """Quantize float32 weights [n, k] to ``kind`` in {"q8_0", "q4_0", "bf16"} (the 8- and
    4-bit arrays cut from the arena `into` when given)."""
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
            return pack_q8(n, k, 0, q, [d], into=into)
        # q4_0
        imax = np.abs(b).argmax(axis=-1)[..., None]
        vmax = np.take_along_axis(b, imax, axis=-1)[..., 0]
        d = vmax / _F32(-8)
        inv = np.where(d == 0, _F32(0), _F32(1) / d).astype(_F32)
        q = np.clip(np.floor(b * inv[..., None] + _F32(8.5)), 0, 15).astype(np.uint8)
        return pack_q4a(n, k, _nibbles_to_q4a(q), d, into=into)


# --------------------------------------------------------------------------- reference


def dequantize(p: Packed) -> np.ndarray:
    """float32 [n, k] values of ``p``, computed exactly as the layout rules say."""
    n, k = p.n, p.k
    if p.fmt == FMT_BF16:
        return (p.q.astype(np.uint32) << np.uint32(16)).view(_F32).reshape(n, k)
    if p.fmt not in (FMT_Q4A, FMT_Q8, *K_FORMATS):
        raise ValueError(f"unknown packed format {p.fmt}")
    s = scales(p).transpose(0, 2, 1)               # [n, nb, S] float32
    v = values(p).astype(_F32)                     # [n, nb, 32]
    if p.fmt in (FMT_K4, FMT_K5):
        return (v * s[..., 0:1] + s[..., 1:2]).reshape(n, k)
    if p.fmt == FMT_K6:
        return (v * np.repeat(s[..., 0:2], 16, axis=-1)).reshape(n, k)
    out = v * s[..., 0:1]
    if p.flags & HAS_MIN:
        out += s[..., -1:]
    return out.reshape(n, k)
