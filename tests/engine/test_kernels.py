"""Shape invariance of the forward's tensor operations (the exactness contract).

Every check compares raw bit patterns (so +0/-0 and NaN payloads count too):
a row's result must not depend on how many rows came with it, where it sat,
what the other rows held, or (attention) how the positions were chunked and
what lies in the pool past them.  Run at 1 and 2 threads, in fp32 and bf16.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tensorfold.backends.torch import kernels as K

DTYPES = [torch.float32, torch.bfloat16]
# CUDA serves on these kernels: where a GPU is present every check runs there too
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DEV = torch.device("cpu")


@pytest.fixture(autouse=True, params=DEVICES)
def device(request):
    """Inputs are drawn on the CPU (the same values everywhere) and moved to the device."""
    global DEV
    DEV = torch.device(request.param)
    try:
        yield DEV
    finally:
        DEV = torch.device("cpu")


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    torch.set_num_threads(request.param)
    try:
        yield request.param
    finally:
        torch.set_num_threads(1)


@pytest.fixture(params=DTYPES, ids=["fp32", "bf16"])
def dtype(request):
    return request.param


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit patterns (so +0 and -0, NaN payloads all count)."""
    t = t.contiguous()
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rand(*shape, dtype=torch.float32, g=None, scale=1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * scale).to(DEV, dtype)


def norm_weight(n, dtype, g) -> torch.Tensor:
    """An RMS-norm weight near 1."""
    return (1 + 0.1 * torch.randn(n, generator=g)).to(DEV, dtype)


def check_rowwise(fn, xs, g: torch.Generator, max_rows: int = 40, other_scale=1.0) -> None:
    """fn maps row-aligned contiguous tensors xs (each [rows, ...]; one
    tensor or a tuple) to [rows, ...] row by row.  Compare the all-rows
    result with: rows alone (a sample of 48 plus the ends), batches of every
    size 1..max_rows (at two offsets), rows at random positions among random
    other rows, and unaligned input views.  Every input is a fresh contiguous tensor, so a
    row's elements sit at different offsets (vector body / scalar tail /
    thread chunk) in different calls."""
    xs = (xs,) if isinstance(xs, torch.Tensor) else tuple(xs)
    n = xs[0].shape[0]
    call = lambda sl: fn(*(x[sl].contiguous() for x in xs))
    ref = call(slice(0, n))                             # all rows at once
    singles = sorted({0, n - 1} | set(torch.randperm(n, generator=g)[:min(n, 48)].tolist()))
    for i in singles:
        assert same(call(slice(i, i + 1)), ref[i:i + 1]), f"row {i} alone"
    for m in range(1, max_rows + 1):
        for s in {(7 * m) % (n - m + 1), n - m}:
            assert same(call(slice(s, s + m)), ref[s:s + m]), f"batch of {m} at {s}"
    for trial in range(16):
        m = int(torch.randint(1, max_rows + 1, (1,), generator=g))
        i = int(torch.randint(0, n, (1,), generator=g))
        pos = int(torch.randint(0, m, (1,), generator=g))
        batch = []
        for x in xs:
            b = rand(m, *x.shape[1:], dtype=x.dtype, g=g, scale=other_scale)
            b[pos] = x[i]
            batch.append(b)
        assert same(fn(*batch)[pos:pos + 1], ref[i:i + 1]), f"row {i} at {pos} of {m}"
    views = []
    for x in xs:
        buf = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
        view = buf[1:].view(x.shape)                # not 64-byte aligned
        view.copy_(x)
        views.append(view)
    assert same(fn(*views), ref), "unaligned input"


# ---------------------------------------------------------------- linear ----

LINEAR_SHAPES = [(576, 576), (1536, 576), (576, 1536)]


@pytest.mark.parametrize("shape", LINEAR_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_linear_rows_are_invariant(dtype, threads, shape):
    g = gen(1)
    out_f, in_f = shape
    w = rand(out_f, in_f, dtype=dtype, g=g, scale=in_f ** -0.5)
    x = rand(300, in_f, dtype=dtype, g=g)
    check_rowwise(lambda t: K.linear(t, w), x, g)


def test_linear_bias_and_lead_dims(dtype, threads):
    g = gen(2)
    w = rand(48, 64, dtype=dtype, g=g, scale=0.125)
    b = rand(48, dtype=dtype, g=g)
    x = rand(100, 64, dtype=dtype, g=g)
    check_rowwise(lambda t: K.linear(t, w, b), x, g, max_rows=20)
    assert same(K.linear(x.view(4, 25, 64), w, b).view(100, 48), K.linear(x, w, b))


@pytest.mark.parametrize("tile", [1, 5])
def test_linear_other_tiles(dtype, tile):
    # one thread: on the CPU (now only the float32 reference; serving runs the
    # native kernels) MKL splits odd-sized tiles across threads by slot
    torch.set_num_threads(1)
    g = gen(12)
    w = rand(1536, 576, dtype=dtype, g=g, scale=576 ** -0.5)
    x = rand(64, 576, dtype=dtype, g=g)
    check_rowwise(lambda t: K.linear(t, w, tile=tile), x, g, max_rows=12)
    assert K.linear(x[:0], w, tile=tile).shape == (0, 1536)


def test_linear_accuracy(dtype):
    g = gen(4)
    w = rand(300, 576, g=g, scale=576 ** -0.5).to(dtype)
    x = rand(37, 576, g=g).to(dtype)
    ref = x.double() @ w.double().T
    err = (K.linear(x, w).double() - ref).abs().max().item()
    assert err < (1e-5 if dtype == torch.float32 else 2e-2), err


# ---------------------------------------------------- norm, silu, rope ------

def test_rms_norm_rows_are_invariant(dtype, threads):
    g = gen(5)
    w = norm_weight(576, dtype, g)
    x = rand(300, 576, dtype=dtype, g=g, scale=3.0)
    check_rowwise(lambda t: K.rms_norm(t, w, 1e-5), x, g, other_scale=100.0)
    x = rand(64, 77, dtype=dtype, g=g)                  # odd width: vector tails
    check_rowwise(lambda t: K.rms_norm(t, w[:77], 1e-6), x, g, max_rows=16)


def test_silu_mul_rows_are_invariant(dtype, threads):
    g = gen(6)
    gate = rand(300, 1536, dtype=dtype, g=g, scale=4.0)
    gate[0, :8] = torch.tensor([0.0, -0.0, 89.0, -89.0, 120.0, -120.0, 1e-30, -1e-30]).to(dtype)
    up = rand(300, 1536, dtype=dtype, g=g)
    check_rowwise(K.silu_mul, (gate, up), g, other_scale=4.0)
    gate, up = rand(100, 77, dtype=dtype, g=g, scale=4.0), rand(100, 77, dtype=dtype, g=g)  # odd width
    check_rowwise(K.silu_mul, (gate, up), g, other_scale=4.0)


def test_exp_is_elementwise_exact(threads):
    """Each element's exp bits depend on its value only: the same values at
    every offset and in tensors of many sizes give the same bits."""
    g = gen(7)
    vals = torch.cat([torch.rand(4000, generator=g) * 200 - 105, torch.tensor([0.0, -0.0, float("-inf"), -104.0])]).to(DEV)
    ref = K.exact_exp32(vals)
    for n in (1, 3, 15, 16, 17, 31, 33, 4004):
        for s in range(0, 4004, 997):
            part = vals[s:s + n]
            assert same(K.exact_exp32(part), ref[s:s + n])
    big = vals.repeat(20)                                # > 65536: sliced, threaded
    assert same(K.exact_exp32(big), ref.repeat(20))
    assert ref[-2].item() == 0.0 and ref[-4].item() == 1.0


def test_rope_rows_are_invariant(dtype, threads):
    g = gen(8)
    inv = 1.0 / (10000 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64))
    cos, sin = (t.to(DEV) for t in K.rope_tables(inv, 512))     # built on the CPU, as the models do
    x = rand(300, 9, 64, dtype=dtype, g=g)              # [rows, heads, hd]
    pos = torch.randperm(512, generator=g)[:300].to(DEV)

    def fn(x, cos, sin):
        return K.apply_rope(x.transpose(0, 1), cos, sin).transpose(0, 1)

    check_rowwise(fn, (x, cos[pos], sin[pos]), g, max_rows=24)


def test_elementwise_accuracy(dtype):
    g = gen(9)
    gate = rand(64, 512, g=g, scale=5.0).to(dtype)
    up = rand(64, 512, g=g).to(dtype)
    gd, ud = gate.double(), up.double()
    ref = gd * torch.sigmoid(gd) * ud
    got = K.silu_mul(gate, up).double()
    tol = 3e-7 if dtype == torch.float32 else 8e-3
    assert ((got - ref).abs() <= tol * ref.abs() + 1e-30).all()

    x = rand(64, 576, g=g, scale=2.0).to(dtype)
    w = norm_weight(576, dtype, g)
    xd = x.double()
    ref = w.double() * (xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5))
    got = K.rms_norm(x, w, 1e-5).double()
    tol = 5e-7 if dtype == torch.float32 else 1.6e-2
    assert ((got - ref).abs() <= tol * ref.abs() + 1e-6).all()

    e = (torch.rand(100000, generator=g) * 175 - 87).to(DEV)      # [-87, 88]
    got, ref = K.exact_exp32(e).double(), torch.exp(e.double())
    ulp = (torch.nextafter(ref.float(), torch.full_like(ref.float(), float("inf"))) - ref.float()).double()
    assert ((got - ref).abs() <= ulp).all()


# ------------------------------------------------------------- attention ----

def garbage_pool(blocks, kvh, bsz, hd, dtype, g):
    """A pool whose unwritten slots hold NaN, inf and huge values."""
    pool = torch.randn(blocks, kvh, bsz, hd, generator=g) * 1e30
    pool.view(-1)[::3] = float("nan")
    pool.view(-1)[1::7] = float("inf")
    return pool.to(DEV, dtype)


def write(pool, table, start, x):
    """Write x [kvh, rows, hd] at positions start.. through the block table."""
    bsz = pool.shape[2]
    for r in range(x.shape[1]):
        p = start + r
        pool[table[p // bsz], :, p % bsz] = x[:, r]


class Seq:
    """Random q/k/v for positions 0..n-1 of one sequence."""

    def __init__(self, n, heads, kvh, hd, dtype, seed, scale=2.0):
        g = gen(seed)
        self.q = rand(heads, n, hd, dtype=dtype, g=g, scale=scale)
        self.k = rand(kvh, n, hd, dtype=dtype, g=g, scale=scale)
        self.v = rand(kvh, n, hd, dtype=dtype, g=g)
        self.n, self.heads, self.kvh, self.hd, self.dtype = n, heads, kvh, hd, dtype

    def run(self, chunks, bsz=32, pool_blocks=48, extra=0, seed=0):
        """Attention over the positions fed in `chunks` (sizes), each chunk
        written into a garbage pool at scattered blocks just before its call."""
        g = gen(100 + seed)
        nblk = -(-self.n // bsz)
        perm = torch.randperm(pool_blocks, generator=g)
        table = perm[:nblk + extra].to(DEV)
        kp = garbage_pool(pool_blocks, self.kvh, bsz, self.hd, self.dtype, g)
        vp = garbage_pool(pool_blocks, self.kvh, bsz, self.hd, self.dtype, g)
        outs, s = [], 0
        for c in chunks:
            write(kp, table, s, self.k[:, s:s + c])
            write(vp, table, s, self.v[:, s:s + c])
            outs.append(K.paged_attention(self.q[:, s:s + c], kp, vp, table, s))
            s += c
        assert s == self.n
        return torch.cat(outs)


def sizes(n, c):
    return [min(c, n - s) for s in range(0, n, c)]


@pytest.mark.parametrize("geom", [(300, 9, 3, 64, 32), (150, 4, 4, 32, 16), (150, 6, 2, 128, 48)],
                         ids=["gqa3-hd64-B32", "mha-hd32-B16", "gqa3-hd128-B48"])
def test_paged_attention_chunking_is_invariant(dtype, threads, geom):
    n, heads, kvh, hd, bsz = geom
    seq = Seq(n, heads, kvh, hd, dtype, seed=11)
    whole = seq.run([n], bsz=bsz, pool_blocks=40)
    assert whole.shape == (n, heads * hd) and whole.dtype == dtype
    assert torch.isfinite(whole).all()
    for c in (1, 7, 32, 100):
        assert same(seq.run(sizes(n, c), bsz=bsz, pool_blocks=40, seed=c), whole), f"chunks of {c}"
    assert same(seq.run([5, n - 50, 1, 44], bsz=bsz, pool_blocks=40, seed=3), whole), "ragged chunks"
    assert same(seq.run([n], bsz=bsz, pool_blocks=40, extra=8, seed=4), whole), "trailing blocks"
    assert same(seq.run([n], bsz=bsz, pool_blocks=64, seed=5), whole), "other pool, other blocks"


def test_paged_attention_decode_far_from_chunk_edges(dtype, threads):
    """Decode rows past several key chunks (1000+ positions) match the
    prefill rows bit for bit."""
    seq = Seq(1060, 9, 3, 64, dtype, seed=12, scale=1.0)
    whole = seq.run([1060], pool_blocks=40)
    tail = seq.run([1020] + [1] * 40, pool_blocks=40, seed=1)
    assert same(tail, whole)


def test_paged_attention_refuses_short_table():
    q = torch.randn(4, 3, 16, device=DEV)
    pool = torch.randn(8, 2, 16, 16, device=DEV)
    table = torch.tensor([0], device=DEV)
    with pytest.raises(ValueError):
        K.paged_attention(q, pool, pool, table, 14)  # needs 2 blocks
    assert K.paged_attention(q[:, :0], pool, pool, table, 5).shape == (0, 64)


def test_causal_attention_matches_paged(dtype):
    seq = Seq(200, 6, 2, 32, dtype, seed=13)
    whole = seq.run([200], bsz=16, pool_blocks=20)
    out = torch.cat([K.causal_attention(seq.q[:, s:s + c], seq.k[:, :s + c], seq.v[:, :s + c], s)
                     for s, c in ((0, 77), (77, 1), (78, 122))])
    assert same(out, whole)


def test_paged_attention_accuracy(dtype):
    seq = Seq(300, 9, 3, 64, dtype, seed=14, scale=2.0)
    got = seq.run([100, 200]).double()
    q, k, v = seq.q.double(), seq.k.double(), seq.v.double()
    mask = torch.ones(300, 300, dtype=torch.bool, device=DEV).tril()
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    ref = ref.transpose(0, 1).reshape(300, -1)
    err = (got - ref).abs().max().item()
    # the library's own fp32 attention on the same inputs, for scale
    lib = F.scaled_dot_product_attention(seq.q.float(), seq.k.float(), seq.v.float(), attn_mask=mask, enable_gqa=True)
    lib_err = (lib.transpose(0, 1).reshape(300, -1).to(dtype).double() - ref).abs().max().item()
    assert err <= 1.5 * lib_err + 1e-7, (err, lib_err)
    assert err < (1e-5 if dtype == torch.float32 else 2e-2), err


# ------------------------------------------------------------ whole layer ---

class TinyLayer:
    """A random Llama layer (GQA, rope, SwiGLU) built on the kernels, with a
    paged KV cache."""

    def __init__(self, dtype, seed=21, hidden=64, heads=4, kvh=2, hd=16, inter=160, bsz=16, pool=24):
        g = gen(seed)
        r = lambda *s: rand(*s, dtype=dtype, g=g, scale=s[-1] ** -0.5)
        self.q, self.k, self.v = r(heads * hd, hidden), r(kvh * hd, hidden), r(kvh * hd, hidden)
        self.qb = rand(heads * hd, dtype=dtype, g=g, scale=0.1)
        self.o, self.gate, self.up, self.down = r(hidden, heads * hd), r(inter, hidden), r(inter, hidden), r(hidden, inter)
        self.n1 = norm_weight(hidden, dtype, g)
        self.n2 = norm_weight(hidden, dtype, g)
        self.head = r(97, hidden)
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        self.cos, self.sin = (t.to(DEV) for t in K.rope_tables(inv, 256))
        self.heads, self.kvh, self.hd, self.bsz = heads, kvh, hd, bsz
        self.kp = garbage_pool(pool, kvh, bsz, hd, dtype, g)
        self.vp = garbage_pool(pool, kvh, bsz, hd, dtype, g)
        self.table = torch.randperm(pool, generator=g).to(DEV)

    def forward(self, x, start):
        rows = x.shape[0]
        cos, sin = self.cos[start:start + rows], self.sin[start:start + rows]
        h = K.rms_norm(x, self.n1, 1e-5)
        q = K.linear(h, self.q, self.qb).view(rows, self.heads, self.hd).transpose(0, 1)
        k = K.linear(h, self.k).view(rows, self.kvh, self.hd).transpose(0, 1)
        v = K.linear(h, self.v).view(rows, self.kvh, self.hd).transpose(0, 1)
        q, k = K.apply_rope(q, cos, sin), K.apply_rope(k, cos, sin)
        write(self.kp, self.table, start, k)
        write(self.vp, self.table, start, v)
        x = x + K.linear(K.paged_attention(q, self.kp, self.vp, self.table, start), self.o)
        h = K.rms_norm(x, self.n2, 1e-5)
        x = x + K.linear(K.silu_mul(K.linear(h, self.gate), K.linear(h, self.up)), self.down)
        return K.linear(K.rms_norm(x, self.n2, 1e-5), self.head).float()


def test_tiny_layer_whole_chunked_row_by_row(dtype, threads):
    x = rand(100, 64, dtype=dtype, g=gen(22))
    whole = TinyLayer(dtype).forward(x, 0)
    for chunk in (1, 13):
        layer = TinyLayer(dtype)
        out = torch.cat([layer.forward(x[s:s + c], s) for s, c in zip(range(0, 100, chunk), sizes(100, chunk))])
        assert same(out, whole), f"chunks of {chunk}"


def test_linear_tile_constants_are_sane():
    assert K.LINEAR_TILE >= 1 and K.ATTN_ROW_TILE >= 1 and K.ATTN_KEY_CHUNK >= 1
    assert math.isfinite(K.exact_exp32(torch.tensor([-1.0], device=DEV)).item())
