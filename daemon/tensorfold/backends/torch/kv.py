"""The paged KV pool and the batch description a forward runs over."""

from __future__ import annotations

from dataclasses import dataclass

import torch


class KVPool:
    """Keys and values of every layer: [layers, num_blocks, kv_heads, block_size, head_dim] each.

    Block b holds positions i*B .. i*B+B-1 of whichever sequence has b at
    index i of its block table (engine/cache.py does the bookkeeping).
    """

    def __init__(self, layers: int, kv_heads: int, head_dim: int, num_blocks: int, block_size: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        shape = (layers, num_blocks, kv_heads, block_size, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size

    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


@dataclass(slots=True)
class Segment:
    """Rows for positions start..start+rows-1 of one sequence inside a forward's batch."""

    table: torch.Tensor      # int64 [blocks]: the sequence's block table
    start: int
    rows: int
    src: int = -1            # a hybrid's state slots (engine/states.py): the first row reads src,
    dst: list[int] | None = None     # row j leaves its state in dst[j]

    def slots(self, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(block id, offset in block) of each row's position."""
        pos = torch.arange(self.start, self.start + self.rows)
        return self.table[pos // block_size], pos % block_size
