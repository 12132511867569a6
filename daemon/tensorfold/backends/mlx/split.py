"""The MLX engine's CPU threads: each linear's output columns split over CPU streams.

MLX's CPU backend runs one stream's work on one thread, and matrix products
are nearly all of a decode step there.  With `threads` CPU streams, every
linear layer (and a tied embedding used as the logits head) holds its output
columns in `threads` contiguous pieces; each piece is computed on its own
stream, the pieces at once, and they are concatenated.  An output element is
the same reduction, in the same order, as in the whole product (the columns
of a product are computed independently), so a row's bits do not depend on
the thread count: `tensorfold exactness` compares 1 thread with 2.  On a GPU
nothing is split.

Imported only once mlx is known to be installed (runner.mlx_missing).
"""

from __future__ import annotations

import threading
from typing import Any

import mlx.core as mx
import mlx.nn as nn

LINEARS = (nn.Linear, nn.QuantizedLinear)
EMBEDDINGS = (nn.Embedding, nn.QuantizedEmbedding)


def bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous ranges covering 0..n, as equal as they can be."""
    edges = [n * i // parts for i in range(parts + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def pieces(module: nn.Module, parts: int, copy: bool) -> list[nn.Module]:
    """`module` as `parts` modules of its kind, each with a contiguous range of its output rows:
    copies (the original can go) or views of its arrays."""
    names = {"weight", "scales", "biases", "bias"}
    out = []
    for a, b in bounds(module["weight"].shape[0], parts):
        piece = dict.__new__(type(module))
        piece.__dict__.update(module.__dict__)           # the kind's settings (group size, bits, mode)
        for key, value in module.items():
            dict.__setitem__(piece, key, (mx.array(value[a:b]) if copy else value[a:b]) if key in names else value)
        out.append(piece)
    return out


class Streams(threading.local):
    """`count` CPU streams of the calling thread (MLX's streams belong to the thread that made
    them), made on first use in each thread."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.made: list[Any] = []

    def get(self) -> list[Any]:
        if not self.made:
            self.made = [mx.new_stream(mx.cpu) for _ in range(self.count)]
        return self.made


def on_streams(streams: Streams, calls: list[Any], x: mx.array) -> mx.array:
    """`call(x)` for each call on its own stream, concatenated along the last axis."""
    outs = []
    for stream, call in zip(streams.get(), calls):
        with mx.stream(stream):
            outs.append(call(x))
    return mx.concatenate(outs, axis=-1)


class SplitLinear(nn.Module):
    """A linear layer as column pieces, each on its own CPU stream."""

    def __init__(self, linear: nn.Module, streams: Streams) -> None:
        super().__init__()
        self.pieces = pieces(linear, streams.count, copy=True)
        self._streams = streams

    def __call__(self, x: mx.array) -> mx.array:
        return on_streams(self._streams, self.pieces, x)


class SplitEmbedding(nn.Module):
    """An embedding whose `as_linear` (the tied logits head) runs in column pieces on CPU
    streams, each reading a row range of the one embedding matrix."""

    def __init__(self, embedding: nn.Module, streams: Streams) -> None:
        super().__init__()
        self.embedding = embedding
        self._heads = pieces(embedding, streams.count, copy=False)
        mx.eval(self._heads)        # made here, on this thread's stream; a private attribute is no parameter
        self._streams = streams

    def __call__(self, x: mx.array) -> mx.array:
        return self.embedding(x)

    def as_linear(self, x: mx.array) -> mx.array:
        return on_streams(self._streams, [head.as_linear for head in self._heads], x)


def split_linears(model: nn.Module, threads: int) -> int:
    """Every linear of `model`, and its embeddings' `as_linear`, in `threads` column pieces on
    as many CPU streams; the number of layers split (none for one thread)."""
    if threads < 2:
        return 0
    streams = Streams(threads)
    count = 0
    for _, module in list(model.named_modules()):
        for name, child in list(module.children().items()):
            if isinstance(child, LINEARS):
                module[name] = SplitLinear(child, streams)
            elif isinstance(child, EMBEDDINGS):
                module[name] = SplitEmbedding(child, streams)
            else:
                continue
            count += 1
    mx.eval(model.parameters())
    return count
