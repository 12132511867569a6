"""Where a prompt's images sit: the inputs and M-RoPE positions of their rows, and the
prefix cache's view of them.

An image occupies `tokens` consecutive prompt positions from `offset` (its pad
tokens); those rows take the image's embeddings instead of the pad token's.
M-RoPE (Qwen3.5): a text position's three components are its text position; an
image's (t, h, w) merged-patch grid starts at the text position where it begins
(start + t, start + h, start + w), and the text after it resumes at
start + max(h, w), so every later position sits tokens - max(h, w) lower than
its index.  In the prefix cache an image's positions count by the image's
digest, so only the same picture at the same place matches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class Placed:
    """An encoded image (vision.encoder.Encoded) at prompt positions offset.."""

    offset: int
    image: Any

    @property
    def end(self) -> int:
        return self.offset + self.image.tokens

    @property
    def shift(self) -> int:
        """How much lower than its index every position after the image sits in M-RoPE."""
        _, h, w = self.image.grid
        return self.image.tokens - max(h, w)


def cache_key(prompt: Sequence[int], images: Sequence[Placed]) -> list[int]:
    """The prompt as the prefix cache keys it: each image position a negative number
    drawn from the image's digest and the position within it (never a token id)."""
    if not images:
        return list(prompt)
    key = list(prompt)
    for placed in images:
        seed = int(hashlib.sha256(placed.image.digest.encode()).hexdigest()[:15], 16)
        for j in range(placed.image.tokens):
            key[placed.offset + j] = -1 - (seed + j) % (1 << 60)
    return key


def row_inputs(images: Sequence[Placed], start: int, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For positions start..start+rows-1 of one sequence: each row's index into the
    returned embeddings (-1: its token's own), those embeddings [n, hidden], and its
    M-RoPE positions [rows, 3]."""
    index = np.arange(start, start + rows)
    mrope = np.repeat(index[:, None], 3, axis=1)
    embed_row = np.full(rows, -1, dtype=np.int32)
    parts: list[np.ndarray] = []
    taken = 0
    for placed in images:
        after = index >= placed.end
        mrope[after] -= placed.shift
        inside = (index >= placed.offset) & (index < placed.end)
        if not inside.any():
            continue
        j = index[inside] - placed.offset
        _, h, w = placed.image.grid
        base = placed.offset - sum(p.shift for p in images if p.end <= placed.offset)
        mrope[inside] = np.stack([base + j // (h * w), base + (j // w) % h, base + j % w], axis=1)
        embed_row[inside] = taken + np.arange(int(inside.sum()))
        parts.append(placed.image.embeds[j])
        taken += int(inside.sum())
    embeds = np.concatenate(parts) if parts else np.zeros((0, 1), np.float32)
    return embed_row, np.ascontiguousarray(embeds, dtype=np.float32), np.ascontiguousarray(mrope, dtype=np.int32)
