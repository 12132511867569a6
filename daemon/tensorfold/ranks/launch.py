"""Starting the ranks: `tensorfold serve --ranks N` spawns ranks 1..N-1 itself
(python -m tensorfold.ranks.follower, on this host); under torchrun every
process is started by torchrun, rank 0 serves and the others follow.

Rank 0 hosts the TCP store (under torchrun, torchrun's agent does); each
follower loads its part of the model, says so in the store (or says why it
could not), then joins the process groups.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import torch.distributed as dist

from ..config import EngineConfig
from ..native.runner import NativeRunner
from . import torchrun_rank
from .follower import follow
from .group import RankGroup
from .leader import Leader

log = logging.getLogger(__name__)

PREFIX = "tensorfold"
START_SECONDS = 600.0        # a follower loads its part of the model within this
STEP_SECONDS = 60.0          # a gather inside a forward waits this long for every rank


class RanksUnavailable(RuntimeError):
    pass


def _store(host: str, port: int, ranks: int, master: bool) -> dist.Store:
    store = dist.TCPStore(host, port, ranks, master, wait_for_workers=False)
    return dist.PrefixStore(PREFIX, store)


def torchrun_store(rank: int, ranks: int, host: str, port: int) -> dist.Store:
    # torchrun's agent hosts a store on MASTER_PORT for its workers when it says so
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    return _store(host, port, ranks, master=rank == 0 and not agent)


def start_leader(folder: Path, config: EngineConfig) -> Leader:
    ranks = config.ranks
    started = torchrun_rank()
    followers: list[subprocess.Popen] = []
    if started:
        rank, world, host, port = started
        if world != ranks or rank != 0:
            raise RanksUnavailable(f"torchrun started {world} ranks (this is rank {rank}); --ranks says {ranks}")
        store = torchrun_store(0, ranks, host, port)
    else:
        master = dist.TCPStore("127.0.0.1", 0, ranks, True, wait_for_workers=False)
        store = dist.PrefixStore(PREFIX, master)
        followers = [_spawn(folder, config, rank, master.port) for rank in range(1, ranks)]
    try:
        runner = NativeRunner(folder, weights=config.weights, threads=config.threads, rank=0, ranks=ranks,
                              kv_cache=config.kv_cache)
        _wait_ready(store, ranks, followers)
        group = RankGroup(store, 0, ranks, STEP_SECONDS)
    except BaseException:
        for proc in followers:
            proc.kill()
        raise
    log.info("%d ranks joined (gloo)", ranks)
    return Leader(runner, group, followers)


def _spawn(folder: Path, config: EngineConfig, rank: int, port: int) -> subprocess.Popen:
    args = [str(folder), str(rank), str(config.ranks), str(port), config.weights, str(config.threads or 0),
            config.kv_cache]
    return subprocess.Popen([sys.executable, "-m", "tensorfold.ranks.follower", *args])


def _wait_ready(store: dist.Store, ranks: int, followers: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + START_SECONDS
    for rank in range(1, ranks):
        while not store.check([f"ready/{rank}"]):
            if store.check([f"failed/{rank}"]):
                raise RanksUnavailable(f"rank {rank} could not start: {store.get(f'failed/{rank}').decode()}")
            proc = followers[rank - 1] if followers else None
            if proc is not None and proc.poll() is not None:
                raise RanksUnavailable(f"rank {rank} exited with code {proc.returncode} while starting")
            if time.monotonic() > deadline:
                raise RanksUnavailable(f"rank {rank} did not start within {START_SECONDS:.0f} s")
            time.sleep(0.05)


def run_follower(folder: str, rank: int, ranks: int, host: str, port: int, weights: str, threads: int | None,
                 store: dist.Store | None = None, kv_cache: str = "fp16") -> int:
    """A follower's life: load, say ready, follow rank 0 until it stops (0) or is gone (1)."""
    store = store or _store(host, port, ranks, master=False)
    try:
        runner = NativeRunner(Path(folder), weights=weights, threads=threads, rank=rank, ranks=ranks,
                              kv_cache=kv_cache)
    except Exception as exc:
        store.set(f"failed/{rank}", str(exc))
        log.error("rank %d could not start: %s", rank, exc)
        return 1
    store.set(f"ready/{rank}", "1")
    group = RankGroup(store, rank, ranks, STEP_SECONDS)
    try:
        follow(runner, group)
    except Exception as exc:  # noqa: BLE001 - rank 0 is gone or out of step: nothing left to serve
        log.error("rank %d stops: %s", rank, exc)
        group.close(failed=True)
        return 1
    group.close()
    return 0
