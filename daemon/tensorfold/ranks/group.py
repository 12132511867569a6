"""The ranks' process groups (gloo) and the gather the split C forward calls.

Two groups over one TCP store: `control` carries rank 0's commands (a
follower waits on it between requests for as long as the server is idle;
rank 0's sends wait at most a step's timeout) and
`data` carries the gathers inside a forward and the logits, where a rank that
stops answering fails the step after `step_timeout` seconds instead of
hanging it.
"""

from __future__ import annotations

import ctypes as C
import datetime
import logging

import torch
import torch.distributed as dist

from ..native import lib

log = logging.getLogger(__name__)

IDLE = datetime.timedelta(days=365)       # a follower waits this long for the next command


class RankGroup:
    def __init__(self, store: dist.Store, rank: int, ranks: int, step_timeout: float = 60.0) -> None:
        self.rank, self.ranks = rank, ranks
        self.step_timeout = datetime.timedelta(seconds=step_timeout)
        self.control = dist.ProcessGroupGloo(dist.PrefixStore("control", store), rank, ranks, IDLE)
        self.data = dist.ProcessGroupGloo(dist.PrefixStore("data", store), rank, ranks, self.step_timeout)
        self.error: BaseException | None = None      # why the last gather failed
        self.gather = lib.GATHER(self._gather)
        self.bytes_sent = 0                           # by this rank's gathers, in all
        self.gathers = 0

    # -- commands (rank 0 to all) ---------------------------------------------------
    def broadcast(self, tensor: torch.Tensor) -> None:
        """Rank 0's `tensor` into every rank's.  Rank 0 waits at most a step's timeout (a
        follower that is not back waiting for commands by then is out of step); a follower
        waits as long as the server is idle."""
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        if self.rank == 0:
            opts.timeout = self.step_timeout
        self.control.broadcast([tensor], opts).wait()

    def close(self, failed: bool = False) -> None:
        """End both groups (their threads; a process that exits with them running aborts);
        `failed`: a peer is gone, so abort them rather than wait for it."""
        for pg in (self.control, self.data):
            pg.abort() if failed else pg.shutdown()

    # -- gathers --------------------------------------------------------------------
    def all_gather(self, part: torch.Tensor) -> torch.Tensor:
        """Every rank's `part` (same shape on each), stacked rank by rank."""
        out = torch.empty((self.ranks, *part.shape), dtype=part.dtype)
        self._all_gather_into(out, part)
        return out

    def _all_gather_into(self, out: torch.Tensor, part: torch.Tensor) -> None:
        """out[r] = rank r's `part`; counted in bytes_sent and gathers."""
        self.data.allgather([list(out.unbind(0))], [part]).wait(self.step_timeout)
        self.bytes_sent += part.numel() * part.element_size()
        self.gathers += 1

    def _gather(self, send: int, recv: int, count: int) -> int:
        """lib.GATHER for the C forward: 0, or 1 with the exception kept in `error`."""
        try:
            part = torch.frombuffer((C.c_float * count).from_address(send), dtype=torch.float32)
            whole = torch.frombuffer((C.c_float * (count * self.ranks)).from_address(recv), dtype=torch.float32)
            self._all_gather_into(whole.view(self.ranks, count), part)
            return 0
        except BaseException as exc:     # noqa: BLE001 - it cannot cross the C frames; kept for the caller
            self.error = exc
            return 1
