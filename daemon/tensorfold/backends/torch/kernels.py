"""The few tensor operations the torch model files share, made shape-invariant.

The torch backend serves CUDA (the CPU serves on the native kernels,
tensorfold.native) and is the float32 reference the CPU engine is measured
against.

Every model family computes its linears, norms, activations and attention
through these, so the engine's exactness rule lives in one place: a row's
(a position's) result is bitwise identical however many rows the call
carries, wherever the row sits in the batch, whatever the other rows hold,
and (attention) however the prompt was chunked and however many unused KV
blocks follow.

How each operation gets there:

- Library matmuls choose their kernel, blocking and thread split from the
  call's shape, so a row's bits depend on how many rows came with it.  Every
  matmul here is therefore issued with ONE fixed shape per weight (and per
  attention head group): the rows are cut into fixed tiles padded with zeros.
  What is left to trust is that, inside a call of a fixed shape, a row's
  result does not depend on its slot or on the other rows; the tests check
  exactly that, at 1 and 2 threads, for fp32 and bf16.
- Elementwise transcendental ops take different code paths (vector body,
  scalar tail, thread chunk edges) for different elements of one tensor.
  exp is built here from IEEE basic operations (+ - * /, round, clamp, bit
  tricks), each correctly rounded whatever the path, so each element's bits
  depend on its value only.
- Reductions whose order the library picks (sum, mean, softmax) are replaced
  by an exact max and by ordered sequential sums (cumsum walks its axis in
  order), whose order depends only on the reduced length we fix.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import model_args

# These sizes fix the shapes of every library call, hence the bits of every
# result: set them once, before the first forward, and keep them for the
# server's life (like the thread count).
#
# Rows per linear call.  Every library matmul for a weight runs on exactly
# this many rows (the last tile padded with zeros).  Smaller is cheaper for
# 1-row decode, larger for prefill and many lanes.
LINEAR_TILE = 16
# Query rows per attention call, and keys per attention call (whole cache
# blocks: max(1, ATTN_KEY_CHUNK // B) blocks of B positions).
ATTN_ROW_TILE = 8
ATTN_KEY_CHUNK = 256

_NEG_INF = float("-inf")


# --------------------------------------------------------------------------
# linear
# --------------------------------------------------------------------------

def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           tile: int | None = None) -> torch.Tensor:
    """x [rows, in] @ weight.T [in, out] (+ bias) -> [rows, out], row-invariant.

    The rows are cut into tiles of exactly `tile` rows (default LINEAR_TILE;
    the last padded with zeros, every tile 64-byte aligned), so the library
    always sees one shape for this weight.  The tile is a per-weight choice:
    pass the same value on every call with this weight (e.g. a smaller tile
    for a memory-bound lm head that sees few rows).
    """
    lead = x.shape[:-1]
    x = x.reshape(-1, x.shape[-1])
    rows = x.shape[0]
    if rows == 0:
        return x.new_empty((*lead, weight.shape[0]))
    T = tile or LINEAR_TILE
    tiles = -(-rows // T)
    step_aligned = (T * x.shape[1] * x.element_size()) % 64 == 0
    if rows == tiles * T and x.is_contiguous() and x.data_ptr() % 64 == 0 and step_aligned:
        xp = x
    else:
        xp = x.new_zeros((tiles * T, x.shape[1]))
        xp[:rows] = x
    if not step_aligned:  # each tile gets its own aligned buffer
        parts = [F.linear(xp[t * T:(t + 1) * T].clone(), weight, bias) for t in range(tiles)]
    else:
        parts = [F.linear(xp[t * T:(t + 1) * T], weight, bias) for t in range(tiles)]
    out = parts[0] if tiles == 1 else torch.cat(parts)
    return out[:rows].reshape(*lead, -1)


# --------------------------------------------------------------------------
# exp from basic operations, silu
# --------------------------------------------------------------------------

_LOG2E = 1.4426950408889634
# ln 2 split for Cody-Waite reduction: _LN2_HI has 9 significant bits, so
# n * _LN2_HI is exact for |n| <= 2^15 and x - n * _LN2_HI is exact.
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
# exp(r) = 1 + r + r^2 * q(r) on |r| <= 0.3467; q's coefficients (fp32
# values) from a weighted least-squares fit on Chebyshev nodes: the fp32
# evaluation below is within 0.81 ulp of exp on the reduced range.
_Q = (0.49999988079071045, 0.166665181517601, 0.041669536381959915,
      0.008368941955268383, 0.001375131425447762)


def exact_exp32(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """exp(x) in fp32 from correctly rounded basic operations only (no fused
    multiply-add), so each element's bits depend on its value alone, not on
    where it sits in the tensor or how the tensor is split into vector
    bodies, scalar tails and thread chunks.

    Within 1 ulp of exp (0.27 ulp on average) for -87 <= x <= 88.  Inputs
    are clamped to [-88, 88]: exp(x >= 88) gives exp(88) (1.65e38), and from
    about -87.67 down (exp < 8e-39, -inf included) the result is +0, so
    masked scores cost no subnormal arithmetic (a slow microcode path on
    x86); in between it gives the correctly scaled subnormal.

    inplace=True overwrites x (contiguous fp32) with the result.  Large
    inputs are processed in cache-sized slices (elementwise, so slicing
    does not change any element's bits)."""
    if not inplace:
        x = x.to(dtype=torch.float32, memory_format=torch.contiguous_format, copy=True)
    elif x.dtype != torch.float32 or not x.is_contiguous():
        raise ValueError("exact_exp32(inplace=True) needs a contiguous fp32 tensor")
    flat = x.view(-1)
    n = flat.numel()
    if n == 0:
        return x
    piece = min(n, _EXP_SLICE)
    bufs = _exp_scratch(piece, x.device)
    for s in range(0, n, piece):
        e = min(n, s + piece)
        _exp_slice(flat[s:e], *(b[:e - s] for b in bufs))
    return x


_EXP_SLICE = 1 << 16
# Inputs are clamped to [-88, 88]; round(-88 * log2 e) = -127, whose
# exponent field is 0: the scale factor is +0.0, so exp(-88) is exactly +0;
# round(88 * log2 e) = 127, the largest normal exponent.
_EXP_LOW, _EXP_HIGH = -88.0, 88.0


def _exp_scratch(piece: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    return torch.empty((3, piece), dtype=torch.float32, device=device).unbind(0)


def _exp_slice(x: torch.Tensor, n: torch.Tensor, t: torch.Tensor, p: torch.Tensor) -> None:
    """x <- exp(x) on a contiguous fp32 slice; n, t, p are scratch of x's size."""
    x.clamp_(_EXP_LOW, _EXP_HIGH)                       # NaN stays NaN
    torch.mul(x, _LOG2E, out=n)
    n.round_()                                          # n in [-127, 127]
    torch.mul(n, _LN2_HI, out=t)
    x.sub_(t)                                           # exact (Sterbenz)
    torch.mul(n, _LN2_LO, out=t)
    x.sub_(t)                                           # r, |r| <= ln2/2 (+tiny)
    torch.mul(x, _Q[4], out=p)                          # Horner: q(r)
    p.add_(_Q[3])
    p.mul_(x)
    p.add_(_Q[2])
    p.mul_(x)
    p.add_(_Q[1])
    p.mul_(x)
    p.add_(_Q[0])
    torch.mul(x, x, out=t)
    p.mul_(t)                                           # y = 1 + (r + r*r*q)
    p.add_(x)
    p.add_(1.0)
    e = t.view(torch.int32)                             # 2^n from its bits; n = -127 -> +0.0
    e.copy_(n)                                          # integral: exact
    e.add_(127)
    e.bitwise_left_shift_(23)
    torch.mul(p, t, out=x)                              # exact unless the result is subnormal


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up = gate / (1 + exp(-gate)) * up, elementwise-exact:
    computed in fp32 (for fp32 and bf16 inputs) with exact_exp32 and correctly
    rounded +, /, *, then cast back to gate's dtype once.  (For gate < -88,
    exp(-gate) is held at exp(88): the result is about gate / 1.65e38
    instead of a value smaller still.)  Processed in cache-sized slices
    (elementwise: no bit depends on them)."""
    out = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    g_all, u_all, o_all = gate.reshape(-1), up.reshape(-1), out.view(-1)
    n = g_all.numel()
    if n == 0:
        return out
    piece = min(n, _EXP_SLICE)
    e_b = torch.empty(piece, dtype=torch.float32, device=gate.device)
    scratch = _exp_scratch(piece, gate.device)
    for s in range(0, n, piece):
        m = min(n, s + piece) - s
        g = g_all[s:s + m]
        e = e_b[:m]
        e.copy_(g)                                      # bf16 -> fp32 exactly
        e.neg_()
        _exp_slice(e, *(b[:m] for b in scratch))        # exp(-g)
        e.add_(1.0)
        torch.div(g, e, out=e)                          # silu(g)
        e.mul_(u_all[s:s + m])
        o_all[s:s + m] = e
    return out


# --------------------------------------------------------------------------
# norms, rope
# --------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm (Llama/Qwen): weight * (x / sqrt(mean(x^2) + eps)).to(x.dtype).

    The squares are fp32; their sum over the hidden axis is a float64
    cumsum, a sequential walk along the axis (one fixed order, set by the
    hidden size only); mean, +eps, sqrt and 1/x are correctly rounded
    float64 ops; the scale is applied in fp32."""
    h = x.to(torch.float32)
    ss = torch.cumsum(h * h, dim=-1, dtype=torch.float64)[..., -1:]
    ss.div_(h.shape[-1]).add_(eps).sqrt_().reciprocal_()
    return weight * (h * ss.to(torch.float32)).to(x.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding in the rotate-half layout (elementwise mul/add: exact
    per element).  x [heads, rows, head_dim]; cos, sin [rows, head_dim] (fp32).
    """
    half = x.shape[-1] // 2
    xf = x.to(torch.float32)
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


def rope_tables(inv_freq, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [max_positions, head_dim] in fp32 from inverse frequencies [head_dim/2]
    (an array or a CPU tensor): the CPU engine's (backends/model_args.py), so both engines
    have the same bits."""
    return tuple(torch.from_numpy(t) for t in model_args.rope_tables(inv_freq, max_positions))


# --------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------

def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    """The attention core on gathered keys.

    q [heads, rows, hd] (positions start..start+rows-1); k, v
    [nch, kvh, kc, hd] fp32: key j of chunk c is position c*kc + j,
    positions >= start+rows hold zeros.
    Returns [rows, heads*hd] in q's dtype.

    The work is a list of items (query tile t of T rows, key chunk c <= the
    last chunk the tile's rows can see), per kv head group of G query heads:
      scores   one bmm of fixed shape [kvh, T*G, hd] x [kvh, hd, kc] per item;
               a key always sits in the same column of a same-shaped call
               (chunks are aligned to absolute positions), a query row's slot
               in the tile is what varies.
      max      exact (order-free) over the row's keys 0..p.
      weights  exact_exp32(s - max), exactly 0 for masked keys.
      values   one bmm of fixed shape [kvh, T*G, kc] x [kvh, kc, hd] per
               item, and one [kvh, T*G, kc] x [kvh, kc, 1] (all ones) for
               the chunk's weight sums.
      chunks   summed in chunk order by a cumsum (sequential along its axis)
               and read at the row's own chunk p // kc, so only chunks
               0..p//kc count, in the same order for every call.
    """
    H, R, D = q.shape
    nch, KVH, kc, _ = k.shape
    G = H // KVH
    T = ATTN_ROW_TILE
    TG = T * G
    ntiles = -(-R // T)
    R_pad = ntiles * T
    dev = q.device
    f32 = torch.float32

    # queries [ntiles, kvh, T*G, hd]: slot i*G + g holds row t*T+i of head kvh*G+g
    qs = q.to(f32) * (1.0 / math.sqrt(D))
    qs = qs.view(KVH, G, R, D)
    if R_pad != R:
        qs = F.pad(qs, (0, 0, 0, R_pad - R))
    qt = qs.view(KVH, G, ntiles, T, D).permute(2, 0, 3, 1, 4).reshape(ntiles, KVH, TG, D)
    kt = k.transpose(-1, -2)                                       # [nch, kvh, hd, kc]

    cmax = [min(start + min((t + 1) * T, R) - 1, nch * kc - 1) // kc for t in range(ntiles)]
    items = [(t, c) for t in range(ntiles) for c in range(cmax[t] + 1)]
    n = len(items)
    s = torch.empty((n, KVH, TG, kc), dtype=f32, device=dev)
    for j, (t, c) in enumerate(items):
        torch.bmm(qt[t], kt[c], out=s[j])

    # a single partial tile (decode, verify): work on its real rows only
    live = min(R, T) * G if ntiles == 1 else TG
    rl = live // G
    sl = s[:, :, :live]
    # causal mask: only items whose chunk reaches past the tile's first row
    # need one; add 0 / -inf rows of a template (s + 0 == s, s - inf == -inf)
    bias = _causal_bias(kc, T, dev)
    for j, (t, c) in enumerate(items):
        o = start + t * T - c * kc                  # row slot 0's position within the chunk
        if o < kc - 1:
            sl[j].view(KVH, rl, G, kc).add_(bias[o + T:o + T + rl].view(1, rl, 1, kc))
    m = sl.amax(dim=-1)                                                               # [n, kvh, live]
    if ntiles > 1 or nch > 1:
        t_idx = torch.tensor([t for t, _ in items], dtype=torch.int64, device=dev)
        c_idx = torch.tensor([c for _, c in items], dtype=torch.int64, device=dev)
    if ntiles > 1:
        m = torch.full((ntiles, KVH, live), _NEG_INF, dtype=f32, device=dev).scatter_reduce_(
            0, t_idx.view(n, 1, 1).expand(n, KVH, live), m, "amax")[t_idx]
    elif n > 1:
        m = m.amax(dim=0, keepdim=True)
    sl.sub_(m.unsqueeze(-1))
    if live == TG:
        w = exact_exp32(s, inplace=True)
    else:
        w = s.new_zeros(s.shape)
        w[:, :, :live] = exact_exp32(sl)

    o = torch.empty((n, KVH, TG, D), dtype=f32, device=dev)
    d = torch.empty((n, KVH, TG, 1), dtype=f32, device=dev)
    ones = torch.ones((1, kc, 1), dtype=f32, device=dev).expand(KVH, kc, 1)
    for j, (t, c) in enumerate(items):
        torch.bmm(w[j], v[c], out=o[j])
        torch.bmm(w[j], ones, out=d[j])
    if nch > 1:
        # per tile, sequential over chunks; read each row at its own chunk
        cp = torch.zeros(R_pad, dtype=torch.int64, device=dev)
        cp[:R] = (start + torch.arange(R, device=dev)) // kc
        cp = cp.view(ntiles, 1, 1, T, 1, 1)
        o, d = (_chunk_prefix(x, t_idx, c_idx, ntiles, nch, cp, T, G) for x in (o, d))
    out = o.view(ntiles, KVH, T, G, D) / d.view(ntiles, KVH, T, G, 1)   # [ntiles, kvh, T, G, hd]
    out = out.permute(0, 2, 1, 3, 4).reshape(R_pad, H * D)[:R]
    out = out.to(q.dtype)
    return out.add_(0.0)                                            # -0 -> +0


_BIAS: dict[tuple, torch.Tensor] = {}


def _causal_bias(kc: int, T: int, device: torch.device) -> torch.Tensor:
    """[kc + 2T, kc] fp32: row T + v is 0 for keys j <= v and -inf beyond
    (v = a query's position relative to its key chunk, -T <= v < kc + T)."""
    key = (kc, T, device)
    b = _BIAS.get(key)
    if b is None:
        v = torch.arange(-T, kc + T, device=device).unsqueeze(1)
        b = torch.zeros((kc + 2 * T, kc), dtype=torch.float32, device=device)
        b.masked_fill_(torch.arange(kc, device=device) > v, _NEG_INF)
        _BIAS[key] = b
    return b


def _chunk_prefix(x: torch.Tensor, t_idx: torch.Tensor, c_idx: torch.Tensor, ntiles: int, nch: int,
                  cp: torch.Tensor, T: int, G: int) -> torch.Tensor:
    """Per-item partials x [n, kvh, T*G, w] -> for each row, the sum over
    chunks 0..c_p of its tile (cumsum: sequential in chunk order)."""
    _, KVH, _, width = x.shape
    dense = x.new_zeros((ntiles, nch, KVH, x.shape[2], width))
    dense[t_idx, c_idx] = x
    dense = torch.cumsum(dense, dim=1).view(ntiles, nch, KVH, T, G, width)
    return torch.gather(dense, 1, cp.expand(ntiles, 1, KVH, T, G, width))


def _chunk_blocks(block: int) -> tuple[int, int]:
    """(blocks per key chunk, keys per key chunk) for a cache block size."""
    per = max(1, ATTN_KEY_CHUNK // block)
    return per, per * block


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_table: torch.Tensor, start: int) -> torch.Tensor:
    """One sequence's causal attention over a paged KV cache.

    q [heads, rows, hd]: positions start..start+rows-1, rope applied.
    k_cache, v_cache [num_blocks, kv_heads, B, hd]: one layer's pool, the new
    rows' keys/values already written.  block_table [nb] int64: the
    sequence's blocks in position order (block i holds positions
    i*B..i*B+B-1); extra trailing blocks are ignored, entries past position
    start+rows-1 are never read as data.  GQA: heads % kv_heads == 0.
    Scale 1/sqrt(hd); fp32 arithmetic for fp32 and bf16.
    Returns [rows, heads*hd] in q's dtype; the row for position p depends
    bitwise only on q at p and keys/values 0..p.
    """
    H, R, D = q.shape
    _, KVH, B, _ = k_cache.shape
    if H % KVH:
        raise ValueError(f"{H} query heads do not group over {KVH} kv heads")
    if R == 0:
        return q.new_empty((0, H * D))
    L = start + R
    per, kc = _chunk_blocks(B)
    nblk = -(-L // B)
    if block_table.numel() < nblk:
        raise ValueError(f"block table has {block_table.numel()} blocks, positions need {nblk}")
    nch = -(-nblk // per)
    idx = block_table[:nblk].to(torch.int64)
    if nch * per != nblk:
        idx = torch.cat((idx, idx[:1].expand(nch * per - nblk)))  # any real block; zeroed below
    # one gather each, straight into [nch, kvh, kc, hd]: pool row blk*kvh + h
    rows = (idx.view(nch, 1, per) * KVH + torch.arange(KVH, device=idx.device).view(1, KVH, 1)).view(-1)
    k = k_cache.reshape(-1, B * D).index_select(0, rows).view(nch, KVH, kc, D).to(torch.float32)
    v = v_cache.reshape(-1, B * D).index_select(0, rows).view(nch, KVH, kc, D)
    _zero_tail(k, L)
    _zero_tail(v, L)
    return _attend(q, k, v.to(torch.float32), start)


def _zero_tail(x: torch.Tensor, length: int) -> None:
    """Zero positions >= length of x [nch, kvh, kc, hd] (in place)."""
    c, j = divmod(length, x.shape[2])
    if c < x.shape[0]:
        x[c, :, j:] = 0
        x[c + 1:] = 0


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    """One sequence's attention for rows at positions start..start+rows-1.

    q [heads, rows, hd]; k, v [kv_heads, start+rows, hd] (the sequence's
    cache through the last row).  Returns [rows, heads*hd].  Same
    construction as paged_attention, with key chunks of ATTN_KEY_CHUNK
    positions: the same bits as paged_attention whenever the block size
    divides ATTN_KEY_CHUNK.
    """
    H, R, D = q.shape
    KVH, L, _ = k.shape
    if R == 0:
        return q.new_empty((0, H * D))
    kc = ATTN_KEY_CHUNK
    nch = -(-L // kc)
    f32 = torch.float32
    kk = torch.zeros((nch, KVH, kc, D), dtype=f32, device=q.device)
    vv = torch.zeros((nch, KVH, kc, D), dtype=f32, device=q.device)
    for c in range(nch):
        n = min(kc, L - c * kc)
        kk[c, :, :n] = k[:, c * kc:c * kc + n]
        vv[c, :, :n] = v[:, c * kc:c * kc + n]
    return _attend(q, kk, vv, start)
