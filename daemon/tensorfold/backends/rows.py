"""The rows of a forward as the CPU-side runners (native, MLX) take them: segments of
sequences with their block tables, and the checks every such forward makes first."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class Segment:
    """Rows for positions start..start+rows-1 of one sequence inside a forward's batch;
    for a hybrid model, the state slot its first row reads (-1: the zero state) and the
    slot each row leaves its state in (engine/states.py)."""

    table: list[int]
    start: int
    rows: int
    src: int = -1
    dst: list[int] | None = None
    images: tuple = ()             # vision.positions.Placed: the sequence's images (their rows' inputs)


def check_state_slots(seg, slots: int | None) -> None:
    """ValueError unless a hybrid's segment names a state slot for each row and a source slot
    unless it starts at position 0, all within `slots` (None: not checked).  Any segment
    with start, rows, src and dst (this one, and the torch backend's)."""
    after = seg.dst or []
    inside = slots is None or (all(0 <= s < slots for s in after) and seg.src < slots)
    if len(after) != seg.rows or not inside or seg.src < -1 or (seg.src == -1) != (seg.start == 0):
        raise ValueError("a hybrid's segment needs a state slot for each row, and a source slot "
                         "unless it starts at position 0")


def check_rows(tokens: list[int], segments: list[Segment], block_size: int, num_blocks: int,
               max_positions: int, vocab_size: int) -> None:
    """ValueError unless every token is in the vocabulary, there is one per segment row, and
    every segment's positions fit the window and its blocks, which lie in the KV cache."""
    for seg in segments:
        end = seg.start + seg.rows
        if end > max_positions or -(-end // block_size) > len(seg.table):
            raise ValueError(f"positions up to {end} exceed the window or the segment's blocks")
        if seg.table and (min(seg.table) < 0 or max(seg.table) >= num_blocks):
            raise ValueError("a block id is outside the KV cache")
    if len(tokens) != sum(seg.rows for seg in segments):
        raise ValueError("tokens and segment rows differ in number")
    t = np.asarray(tokens, dtype=np.int64)
    if t.size and (t.min() < 0 or t.max() >= vocab_size):
        raise ValueError(f"token id outside the vocabulary (0..{vocab_size - 1})")
