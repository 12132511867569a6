"""What rank 0 sends the other ranks: a header of HEADER int64s on the control
group, then for some commands an int32 payload.

    FORWARD   rows, tables, out rows, image embedding rows (-1: no image inputs);
              payload: tokens, pos, tab_off (rows each), tables, out_rows, then a
              hybrid's state_src and state_dst (rows each), then with image inputs
              embed_row (rows) and mrope (3 per row); then the image embeddings
              (float32, when there are any), the out rows' plans (float64,
              draws.py) and, when some rows have rules, their forbidden tokens
              (uint8 bits) and edits (float64); then every rank runs the forward
              and the logits are exchanged (draws.py)
    ALLOCATE  blocks, block size
    TRIM      blocks; payload: their ids
    STOP      the follower returns
    STATES    slots (a hybrid's state slots, allocated)
    COPY      source slot, destination slot
    TRIM_STATES  slots; payload: their ids
"""

from __future__ import annotations

import numpy as np
import torch

FORWARD, ALLOCATE, TRIM, STOP, STATES, COPY, TRIM_STATES = 1, 2, 3, 4, 5, 6, 7
HEADER = 5


def header(op: int, *values: int) -> torch.Tensor:
    return torch.tensor([op, *values] + [0] * (HEADER - 1 - len(values)), dtype=torch.int64)


def pack(arrays: tuple[np.ndarray, ...]) -> torch.Tensor:
    return torch.from_numpy(np.concatenate(arrays).astype(np.int32, copy=False))


def unpack(payload: torch.Tensor, sizes: list[int]) -> tuple[np.ndarray, ...]:
    return tuple(np.ascontiguousarray(a) for a in np.split(payload.numpy(), np.cumsum(sizes)[:-1]))


def send_forward(group, arrays: tuple[np.ndarray, ...], images: dict[str, np.ndarray], plans: np.ndarray,
                 banned: torch.Tensor | None, edits: torch.Tensor | None) -> None:
    """Rank 0's FORWARD: the header, the rows' arrays (a hybrid's state slots among them), the
    image inputs when there are any (runner.image_inputs), the out rows' plans, and the ruled
    rows' forbidden tokens and edits when there are any."""
    tokens, _, _, tables, out_rows = arrays[:5]
    embeds = images["embeds"] if images else None
    group.broadcast(header(FORWARD, len(tokens), len(tables), len(out_rows), -1 if embeds is None else len(embeds)))
    group.broadcast(pack(arrays + ((images["embed_row"], images["mrope"].reshape(-1)) if images else ())))
    if embeds is not None and len(embeds):
        group.broadcast(torch.from_numpy(embeds))
    group.broadcast(torch.from_numpy(plans))
    if banned is not None:
        group.broadcast(banned)
        group.broadcast(edits)


def receive_forward(group, values: list[int], vocab: int, plan_width: int, ruled: float, hybrid: bool,
                    hidden: int) -> tuple[tuple[np.ndarray, ...], dict[str, np.ndarray], np.ndarray,
                                          torch.Tensor | None, torch.Tensor | None]:
    """What send_forward sent, on another rank (after its header's `values`): the rows'
    arrays (with the state slots of a `hybrid`), the image inputs ({} without), the plans,
    and the forbidden tokens and edits (None without ruled rows)."""
    rows, tables, outs, n_embeds = values[:4]
    sizes = [rows, rows, rows, tables, outs] + [rows, rows] * hybrid + [rows, 3 * rows] * (n_embeds >= 0)
    payload = torch.empty(sum(sizes), dtype=torch.int32)
    group.broadcast(payload)
    arrays = unpack(payload, sizes)
    images = {}
    if n_embeds >= 0:
        embeds = torch.empty((n_embeds, hidden), dtype=torch.float32)
        if n_embeds:
            group.broadcast(embeds)
        images = {"embed_row": arrays[-2], "mrope": arrays[-1].reshape(rows, 3), "embeds": embeds.numpy()}
        arrays = arrays[:-2]
    plans = torch.empty((outs, plan_width), dtype=torch.float64)
    group.broadcast(plans)
    banned = edits = None
    if n_ruled := int((plans[:, 0] == ruled).sum()):
        banned = torch.empty((n_ruled, -(-vocab // 8)), dtype=torch.uint8)
        edits = torch.empty(int(plans[:, 5].sum()), dtype=torch.float64)
        group.broadcast(banned)
        group.broadcast(edits)
    return arrays, images, plans.numpy(), banned, edits


def join_logits(parts: torch.Tensor, widths: list[int]) -> torch.Tensor:
    """[ranks, rows, widest] gathered logits (each rank's vocabulary columns, padded) -> [rows, vocab]."""
    return torch.cat([parts[q, :, :w] for q, w in enumerate(widths)], dim=1)


def padded(logits: torch.Tensor, width: int) -> torch.Tensor:
    if logits.shape[1] == width:
        return logits
    out = torch.zeros((logits.shape[0], width), dtype=logits.dtype)
    out[:, :logits.shape[1]] = logits
    return out
