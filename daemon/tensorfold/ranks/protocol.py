"""What rank 0 sends the other ranks: a header of HEADER int64s on the control
group, then for some commands an int32 payload.

    FORWARD   rows, tables, out rows; payload: tokens, pos, tab_off (rows each),
              tables, out_rows; then the out rows' plans (float64, draws.py) and,
              when some rows have rules, their forbidden tokens (uint8 bits) and
              edits (float64); then every rank runs the forward and the logits
              are exchanged (draws.py)
    ALLOCATE  blocks, block size
    TRIM      blocks; payload: their ids
    STOP      the follower returns
"""

from __future__ import annotations

import numpy as np
import torch

FORWARD, ALLOCATE, TRIM, STOP = 1, 2, 3, 4
HEADER = 4


def header(op: int, *values: int) -> torch.Tensor:
    return torch.tensor([op, *values] + [0] * (HEADER - 1 - len(values)), dtype=torch.int64)


def pack(arrays: tuple[np.ndarray, ...]) -> torch.Tensor:
    return torch.from_numpy(np.concatenate(arrays).astype(np.int32, copy=False))


def unpack(payload: torch.Tensor, sizes: list[int]) -> tuple[np.ndarray, ...]:
    return tuple(np.ascontiguousarray(a) for a in np.split(payload.numpy(), np.cumsum(sizes)[:-1]))


def send_forward(group, arrays: tuple[np.ndarray, ...], plans: np.ndarray, banned: torch.Tensor | None,
                 edits: torch.Tensor | None) -> None:
    """Rank 0's FORWARD: the header, the rows' arrays, the out rows' plans, and the ruled
    rows' forbidden tokens and edits when there are any."""
    tokens, _, _, tables, out_rows = arrays
    group.broadcast(header(FORWARD, len(tokens), len(tables), len(out_rows)))
    group.broadcast(pack(arrays))
    group.broadcast(torch.from_numpy(plans))
    if banned is not None:
        group.broadcast(banned)
        group.broadcast(edits)


def receive_forward(group, values: list[int], vocab: int, plan_width: int, ruled: float
                    ) -> tuple[tuple[np.ndarray, ...], np.ndarray, torch.Tensor | None, torch.Tensor | None]:
    """What send_forward sent, on another rank (after its header's `values`): the rows'
    arrays, the plans, and the forbidden tokens and edits (None without ruled rows)."""
    rows, tables, outs = values[:3]
    sizes = [rows, rows, rows, tables, outs]
    payload = torch.empty(sum(sizes), dtype=torch.int32)
    group.broadcast(payload)
    plans = torch.empty((outs, plan_width), dtype=torch.float64)
    group.broadcast(plans)
    banned = edits = None
    if n_ruled := int((plans[:, 0] == ruled).sum()):
        banned = torch.empty((n_ruled, -(-vocab // 8)), dtype=torch.uint8)
        edits = torch.empty(int(plans[:, 5].sum()), dtype=torch.float64)
        group.broadcast(banned)
        group.broadcast(edits)
    return unpack(payload, sizes), plans.numpy(), banned, edits


def join_logits(parts: torch.Tensor, widths: list[int]) -> torch.Tensor:
    """[ranks, rows, widest] gathered logits (each rank's vocabulary columns, padded) -> [rows, vocab]."""
    return torch.cat([parts[q, :, :w] for q, w in enumerate(widths)], dim=1)


def padded(logits: torch.Tensor, width: int) -> torch.Tensor:
    if logits.shape[1] == width:
        return logits
    out = torch.zeros((logits.shape[0], width), dtype=logits.dtype)
    out[:, :logits.shape[1]] = logits
    return out
