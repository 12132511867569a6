"""A rank other than 0: load its part of the model, then run rank 0's commands
until STOP (or until rank 0 is gone: the group fails and the process exits)."""

from __future__ import annotations

import logging
import os
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
    hybrid = runner.state_bytes() > 0
    head = torch.empty(P.HEADER, dtype=torch.int64)
    while True:
        group.broadcast(head)
        op, *values = head.tolist()
        if op == P.FORWARD:
            arrays, images, plans, banned, edits = P.receive_forward(
                group, values, vocab[-1], D.PLAN, D.RULED, hybrid, runner.args.hidden_size)
            D.exchange(group, runner.model.forward(*arrays, **images), vocab, plans, banned, edits)
        elif op == P.ALLOCATE:
            runner.allocate_kv(values[0], values[1])
        elif op in (P.TRIM, P.TRIM_STATES):
            payload = torch.empty(values[0], dtype=torch.int32)
            group.broadcast(payload)
            (runner.trim_kv if op == P.TRIM else runner.trim_state)(payload.tolist())
        elif op == P.STATES:
            runner.allocate_state(values[0])
        elif op == P.COPY:
            runner.copy_state(values[0], values[1])
        elif op == P.STOP:
            return
        else:
            raise RuntimeError(f"unknown command {op} from rank 0")


def main(argv: list[str] | None = None) -> int:
    """python -m tensorfold.ranks.follower FOLDER RANK RANKS PORT WEIGHTS THREADS KV_CACHE (launch.py spawns it)."""
    from .launch import run_follower

    folder, rank, ranks, port, weights, threads, kv_cache = argv if argv is not None else sys.argv[1:]
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s rank {rank} %(levelname)s %(name)s: %(message)s")
    return run_follower(folder, int(rank), int(ranks), "127.0.0.1", int(port), weights, int(threads) or None,
                        kv_cache=kv_cache)


if __name__ == "__main__":
    code = main()
    # Leave without the interpreter's teardown: gloo's threads, already shut down, are torn
    # down with the process's C++ statics there, and about one exit in ten aborted in it
    # ("terminate called without an active exception") after a clean stop.
    logging.shutdown()
    os._exit(code)
