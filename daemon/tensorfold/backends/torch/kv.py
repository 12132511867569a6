"""Per-sequence KV storage and the batch description a forward runs over."""

from __future__ import annotations

from dataclasses import dataclass

import torch


class SeqKV:
    """One sequence's keys and values: [layers, kv_heads, capacity, head_dim] each."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        shape = (layers, kv_heads, capacity, head_dim)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        self.length = 0          # positions holding valid entries

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


@dataclass(slots=True)
class Segment:
    """Rows start..start+rows-1 of one sequence inside a forward's batch."""

    kv: SeqKV
    start: int
    rows: int
