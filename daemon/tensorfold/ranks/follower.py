"""A rank other than 0: load its part of the model, then run rank 0's commands
until STOP (or until rank 0 is gone: the group fails and the process exits)."""

from __future__ import annotations

import logging
import sys

import torch

from ..native.runner import NativeRunner
from . import draws as D
from . import protocol as P
from .group import RankGroup

log = logging.getLogger(__name__)


def follow(runner: NativeRunner, group: RankGroup) -> None:
    runner.model.set_gather(group.gather)
    vocab = runner.model.shard.vocab
    head = torch.empty(P.HEADER, dtype=torch.int64)
    while True:
        group.broadcast(head)
        op, *values = head.tolist()
        if op == P.FORWARD:
            rows, tables, outs = values
            sizes = [rows, rows, rows, tables, outs]
            payload = torch.empty(sum(sizes), dtype=torch.int32)
            group.broadcast(payload)
            plans = torch.empty((outs, D.PLAN), dtype=torch.float64)
            group.broadcast(plans)
            banned = edits = None
            if n_ruled := int((plans[:, 0] == D.RULED).sum()):
                banned = torch.empty((n_ruled, -(-vocab[-1] // 8)), dtype=torch.uint8)
                edits = torch.empty(int(plans[:, 5].sum()), dtype=torch.float64)
                group.broadcast(banned)
                group.broadcast(edits)
            D.exchange(group, runner.model.forward(*P.unpack(payload, sizes)), vocab, plans.numpy(), banned, edits)
        elif op == P.ALLOCATE:
            runner.allocate_kv(values[0], values[1])
        elif op == P.TRIM:
            payload = torch.empty(values[0], dtype=torch.int32)
            group.broadcast(payload)
            runner.trim_kv(payload.tolist())
        elif op == P.STOP:
            return
        else:
            raise RuntimeError(f"unknown command {op} from rank 0")


def main(argv: list[str] | None = None) -> int:
    """python -m tensorfold.ranks.follower FOLDER RANK RANKS PORT WEIGHTS THREADS (launch.py spawns it)."""
    from .launch import run_follower

    folder, rank, ranks, port, weights, threads = argv if argv is not None else sys.argv[1:]
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s rank {rank} %(levelname)s %(name)s: %(message)s")
    return run_follower(folder, int(rank), int(ranks), "127.0.0.1", int(port), weights, int(threads) or None)


if __name__ == "__main__":
    sys.exit(main())
