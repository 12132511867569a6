"""Rope's cos/sin tables for the C model, written as positions are first reached.

A table row is one position's cos or sin at every frequency.  The tables span the model's
positions (32,768 for the Qwen2.5s: 16-32 MiB for the pair) in an anonymous map that is
backed only where written, and rows are filled in steps of FILL_STEP positions before the
first forward that reaches them.  A row's values do not depend on which step fills it
(`rope_tables` computes each from its position alone), so the bits are those of a table
built whole.
"""

from __future__ import annotations

import mmap

import numpy as np

from ..backends.model_args import rope_tables

FILL_STEP = 1024        # positions: 0.5 MiB of the 1.5B's pair


class RopeTables:
    """cos and sin, fp32 [positions, rot_dim] each, filled up to `filled` positions."""

    def __init__(self, inv_freq: np.ndarray, positions: int) -> None:
        self.inv_freq = inv_freq
        self.positions = positions
        rot_dim = 2 * len(inv_freq)
        self._maps = [mmap.mmap(-1, positions * rot_dim * 4, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
                      for _ in range(2)]
        self.cos, self.sin = (np.frombuffer(m, np.float32).reshape(positions, rot_dim) for m in self._maps)
        self.filled = 0

    def cover(self, stop: int) -> None:
        """Fill the rows of positions below `stop` (capped at the table's end)."""
        if stop <= self.filled:
            return
        end = min(self.positions, -(-stop // FILL_STEP) * FILL_STEP)
        self.cos[self.filled:end], self.sin[self.filled:end] = rope_tables(self.inv_freq, end, self.filled)
        self.filled = end
