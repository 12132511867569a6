"""A forward's logits between the ranks: each rank holds its vocabulary columns.

Rank 0 says per output row how it is drawn (`plans`, sent with the forward):
by the sharded rule (engine/shard_draw.py), after each rank applies the row's
rules to its own columns where it has some (rank 0 sends the tokens they
forbid, a bit per token, and the penalties' and logit_bias' edits as values);
or, for a row with a rule of another kind, from its whole logits on rank 0,
which applies them.  Every rank runs `exchange` with the same plans, so the
gathers line up:

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
from ..engine.constraints import Edits
from ..engine.types import SamplingParams
from . import protocol as P
from .group import RankGroup

WHOLE, DRAW, RULED = 0.0, 1.0, 2.0
PLAN = 6            # per row: kind, temperature, top_k, top_p, min_p, length of its encoded edits

Rules = tuple[list[Edits], np.ndarray]             # constraints.for_shards: edits, forbidden tokens
Draw = tuple[SamplingParams, int, "Rules | None"]  # settings, reply position, the row's rules


def plans_of(draws: list[Draw | None]) -> tuple[np.ndarray, torch.Tensor | None, torch.Tensor | None]:
    """float64 plans [rows, PLAN] (WHOLE: rank 0 draws from the row's whole logits; else DRAW, or
    RULED with rules to apply first, and the settings); for the RULED rows, their forbidden
    tokens a bit each (uint8 [rows, ceil(vocab / 8)]) and their edits (float64, encode_edits)."""
    plans = np.zeros((len(draws), PLAN), dtype=np.float64)
    banned, edits = [], []
    for i, d in enumerate(draws):
        if d is not None:
            p, rules = d[0], d[2]
            code = encode_edits(rules[0]) if rules else None
            plans[i] = (DRAW if rules is None else RULED, p.temperature, p.top_k, p.top_p, p.min_p,
                        0 if code is None else code.size)
            if rules is not None:
                banned.append(rules[1])
                edits.append(code)
    if not banned:
        return plans, None, None
    return plans, torch.from_numpy(np.packbits(np.stack(banned), axis=1)), torch.from_numpy(np.concatenate(edits))


def encode_edits(edits: list[Edits]) -> np.ndarray:
    """float64: per edit n_add, n_sub, n_seen, repetition, then the ids and values (exact: ids
    below 2^53, fp32 values)."""
    parts = []
    for e in edits:
        parts += [np.array([e.add.size, e.sub.size, e.seen.size, e.repetition], dtype=np.float64),
                  e.add, e.add_values, e.sub, e.sub_values, e.seen]
    return np.concatenate(parts, dtype=np.float64) if parts else np.empty(0, dtype=np.float64)


def decode_edits(code: np.ndarray) -> list[Edits]:
    out, i = [], 0
    while i < code.size:
        n_add, n_sub, n_seen = (int(x) for x in code[i:i + 3])
        rep = float(code[i + 3])
        i += 4
        cut = [n_add, n_add, n_sub, n_sub, n_seen]
        a, av, b, bv, seen = np.split(code[i:i + sum(cut)], np.cumsum(cut)[:-1])
        i += sum(cut)
        i64, f32 = np.int64, np.float32
        out.append(Edits(a.astype(i64), av.astype(f32), b.astype(i64), bv.astype(f32), seen.astype(i64), rep))
    return out


def _params(row: np.ndarray) -> SamplingParams:
    return SamplingParams(temperature=float(row[1]), top_k=int(row[2]), top_p=float(row[3]), min_p=float(row[4]))


@dataclass
class Exchanged:
    whole: dict[int, np.ndarray]              # row -> its whole logits [vocab]
    greedy: dict[int, int]                    # row -> its argmax over the vocabulary
    picks: dict[int, list[S.Pick]]            # row -> every rank's pick (the row needs no whole shards)


def exchange(group: RankGroup, logits: np.ndarray, vocab: list[int], plans: np.ndarray,
             banned: torch.Tensor | None, edits: torch.Tensor | None) -> Exchanged:
    """This rank's logits [rows, its columns], the rows' plans, and the RULED rows' forbidden
    tokens and edits (plans_of) -> what rank 0 draws from.  A RULED row's rules are applied
    here first, to this rank's columns, as on the whole row; where the row then needs its
    whole logits, they go to rank 0 as the forward gave them (rank 0 applies the rules)."""
    offset = vocab[group.rank]
    widths = [b - a for a, b in zip(vocab, vocab[1:])]
    ruled = [i for i in range(len(plans)) if plans[i, 0] == RULED]
    codes = np.split(edits.numpy(), np.cumsum([int(plans[i, 5]) for i in ruled])[:-1]) if ruled else []
    raw = {i: logits[i].copy() for i in ruled}        # a row drawn from whole logits gets them as they came
    for k, (i, code) in enumerate(zip(ruled, codes)):
        for e in decode_edits(code):
            e.apply(logits[i], offset)
        bits = np.unpackbits(banned[k].numpy(), count=vocab[-1])[offset:offset + logits.shape[1]]
        logits[i][bits.astype(bool)] = -np.inf
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
        rows = torch.from_numpy(np.stack([raw.get(i, logits[i]) for i in need]))
        parts = group.all_gather(P.padded(rows, max(widths)))
        for i, row in zip(need, P.join_logits(parts, widths).numpy()):
            out.whole[i] = row
    return out


def _encode(p: S.Pick) -> torch.Tensor:
    """int64 [4 + 2 * CANDIDATES]: count, total, whole, partial, ids (padded), masses (padded)."""
    out = torch.zeros(4 + 2 * S.CANDIDATES, dtype=torch.int64)
    n = p.ids.size
    out[:4] = torch.tensor([n, p.total, p.whole, p.partial])
    out[4:4 + n] = torch.from_numpy(p.ids)
    out[4 + S.CANDIDATES:4 + S.CANDIDATES + n] = torch.from_numpy(p.mass)
    return out


def _decode(row: torch.Tensor) -> S.Pick:
    n, total, whole, partial = row[:4].tolist()
    ids, mass = row[4:4 + n].numpy().copy(), row[4 + S.CANDIDATES:4 + S.CANDIDATES + n].numpy().copy()
    return S.Pick(ids, mass, total, bool(whole), bool(partial))
