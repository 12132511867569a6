"""A forward's logits between the ranks: each rank holds its vocabulary columns.

Rank 0 says per output row how it is drawn (`plans`, sent with the forward):
a row whose rules change logit values (penalties, logit_bias) needs its whole
logits on rank 0, which applies them; any other row is drawn by the sharded
rule (engine/shard_draw.py), a row whose rules only forbid tokens (a grammar,
a forced token) after each rank sets its forbidden columns to -inf (rank 0
sends them, a bit per token).  Every rank runs `exchange` with the same
plans, so the gathers line up:

    A  draw rows: each rank's largest logit/temperature and its argmax;
       at temperature 0 the token follows from these alone
    B  sampled rows: each rank's Pick (its CANDIDATES best tokens and masses,
       its total, whether the row needs whole shards): every rank sees every
       pick, so all of them know which rows need whole shards
    C  rows needing whole logits: each rank's columns, joined on every rank

so a greedy decode step exchanges a few numbers per row instead of the
vocabulary, and a sampled one at most 16 KiB per rank and row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..engine import shard_draw as S
from ..engine.types import SamplingParams
from . import protocol as P
from .group import RankGroup

WHOLE, DRAW, MASKED = 0.0, 1.0, 2.0
PLAN = 5            # per row: kind, temperature, top_k, top_p, min_p

Draw = tuple[SamplingParams, int, "torch.Tensor | None"]    # settings, reply position, forbidden tokens


def plans_of(draws: list[Draw | None]) -> np.ndarray:
    """float64 [rows, PLAN]: WHOLE for a row rank 0 draws from its whole logits, else DRAW
    (MASKED: with tokens its rules forbid) and its settings."""
    out = np.zeros((len(draws), PLAN), dtype=np.float64)
    for i, d in enumerate(draws):
        if d is not None:
            p = d[0]
            out[i] = (DRAW if d[2] is None else MASKED, p.temperature, p.top_k, p.top_p, p.min_p)
    return out


def masks_of(draws: list[Draw | None]) -> torch.Tensor:
    """The MASKED rows' forbidden tokens, a bit each: uint8 [rows, ceil(vocab / 8)]."""
    rows = [d[2].numpy() for d in draws if d is not None and d[2] is not None]
    return torch.from_numpy(np.packbits(np.stack(rows), axis=1))


def _params(row: np.ndarray) -> SamplingParams:
    return SamplingParams(temperature=float(row[1]), top_k=int(row[2]), top_p=float(row[3]), min_p=float(row[4]))


@dataclass
class Exchanged:
    whole: dict[int, torch.Tensor]            # row -> its whole logits [vocab]
    greedy: dict[int, int]                    # row -> its argmax over the vocabulary
    picks: dict[int, list[S.Pick]]            # row -> every rank's pick (the row needs no whole shards)


def exchange(group: RankGroup, logits: torch.Tensor, vocab: list[int], plans: np.ndarray,
             masks: torch.Tensor | None) -> Exchanged:
    """This rank's logits [rows, its columns], the rows' plans and the MASKED rows' forbidden
    tokens (masks_of) -> what rank 0 draws from.  A MASKED row's forbidden columns become -inf
    here first, as its rules would set them on the whole row."""
    offset = vocab[group.rank]
    widths = [b - a for a, b in zip(vocab, vocab[1:])]
    masked = [i for i in range(len(plans)) if plans[i, 0] == MASKED]
    for k, i in enumerate(masked):
        bits = np.unpackbits(masks[k].numpy(), count=vocab[-1])[offset:offset + logits.shape[1]]
        logits[i].masked_fill_(torch.from_numpy(bits.astype(bool)), float("-inf"))
    draw_rows = [i for i in range(len(plans)) if plans[i, 0] != WHOLE]
    need = [i for i in range(len(plans)) if plans[i, 0] == WHOLE]
    out = Exchanged({}, {}, {})
    sampled = []
    if draw_rows:                                                                   # A
        local = torch.tensor([[S.local_max(logits[i], plans[i, 1]), *S.local_argmax(logits[i], offset)]
                              for i in draw_rows], dtype=torch.float64)
        stats = group.all_gather(local)                                             # [ranks, rows, 3]
        for k, i in enumerate(draw_rows):
            if float(stats[:, k, 0].max()) == float("-inf"):
                need.append(i)              # every token forbidden: rank 0's sampler says so
            elif plans[i, 1] == 0.0:
                out.greedy[i] = S.global_argmax([(float(v), int(t)) for v, t in stats[:, k, 1:].tolist()])
            else:
                sampled.append((i, float(stats[:, k, 0].max())))
    if sampled:                                                                     # B
        mine = [S.pick(logits[i], offset, _params(plans[i]), z_max) for i, z_max in sampled]
        every = group.all_gather(torch.stack([_encode(p) for p in mine]))         # [ranks, rows, ...]
        for k, (i, _) in enumerate(sampled):
            picks = [_decode(every[r, k]) for r in range(group.ranks)]
            if S.needs_whole(picks, _params(plans[i])):
                need.append(i)
            else:
                out.picks[i] = picks
    if need:                                                                        # C
        need.sort()
        parts = group.all_gather(P.padded(logits[need], max(widths)))
        for i, row in zip(need, P.join_logits(parts, widths)):
            out.whole[i] = row
    return out


def _encode(p: S.Pick) -> torch.Tensor:
    """int64 [4 + 2 * CANDIDATES]: count, total, whole, partial, ids (padded), masses (padded)."""
    out = torch.zeros(4 + 2 * S.CANDIDATES, dtype=torch.int64)
    n = p.ids.numel()
    out[:4] = torch.tensor([n, p.total, p.whole, p.partial])
    out[4:4 + n] = p.ids
    out[4 + S.CANDIDATES:4 + S.CANDIDATES + n] = p.mass
    return out


def _decode(row: torch.Tensor) -> S.Pick:
    n, total, whole, partial = row[:4].tolist()
    return S.Pick(row[4:4 + n].clone(), row[4 + S.CANDIDATES:4 + S.CANDIDATES + n].clone(), total, bool(whole),
                  bool(partial))
