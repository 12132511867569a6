"""Rank 0's Backend: each call goes to the other ranks, then runs here on rank
0's part of the model; a forward's rows are drawn across the ranks' parts of
the vocabulary (draws.py), or their whole logits gathered.

A rank that exits, or a command or gather that fails or times out, puts the
ranks down: `down` says why, the forward in progress raises, the engine ends
the replies in flight, and the server refuses later requests (503) until it is
restarted with its ranks.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch

from ..backends.rows import Segment
from ..engine.shard_draw import merge_draw
from ..native.model import RanksFailed, slot_bytes
from ..native.runner import NativeRunner
from . import draws as D
from . import protocol as P
from .group import RankGroup

log = logging.getLogger(__name__)

T = TypeVar("T")


class Leader:
    draws_on_ranks = True             # forward(..., draws): the keyed draw made across the ranks
    dtype = "float32"
    trims_kv = True                  # trim_kv returns the blocks' memory to the system
    device = "cpu"

    def __init__(self, runner: NativeRunner, group: RankGroup, followers: list[subprocess.Popen]) -> None:
        self.runner = runner
        self.group = group
        self.ranks = group.ranks
        self.vocab_size = runner.vocab_size
        self.max_positions = runner.max_positions
        runner.model.set_gather(group.gather)
        self._vocab = runner.model.shard.vocab
        self.down: str | None = None
        self.last_step = (0, 0)          # the last forward's gathers and the bytes rank 0 sent in them
        self._closing = False
        self._followers = followers
        for rank, proc in enumerate(followers, start=1):
            threading.Thread(target=self._watch, args=(rank, proc), daemon=True,
                             name=f"tensorfold-rank{rank}-watch").start()

    # -- the Backend calls ----------------------------------------------------------
    def describe(self) -> str:
        return f"{self.runner.describe()} on {self.ranks} ranks (gloo)"

    def kv_bytes_per_token(self) -> int:
        """Every rank's KV together: the ranks of one machine share its memory."""
        return self.runner.model.kv_bytes_per_token(every_rank=True)

    def free_memory(self) -> int:
        return self.runner.free_memory()

    def segment(self, *args, **kwargs) -> Segment:
        return self.runner.segment(*args, **kwargs)

    @property
    def model(self):
        """Rank 0's part of the model (what the engine asks of the checkpoint: M-RoPE)."""
        return self.runner.model

    def image_inputs(self, segments: list[Segment]) -> dict:
        return self.runner.image_inputs(segments)

    # -- a hybrid's deltanet states: every rank holds its own heads' part of each slot -----
    def state_bytes(self) -> int:
        """Every rank's part of a slot together: the ranks of one machine share its memory."""
        model = self.runner.model
        if not model.hybrid:
            return 0
        shard, whole = model.shard, self.runner.hybrid
        return sum(slot_bytes(shard.deltanet(whole, q)) for q in range(self.ranks))

    def allocate_state(self, slots: int) -> None:
        self._step(lambda: self.group.broadcast(P.header(P.STATES, slots)))
        self.runner.allocate_state(slots)

    def copy_state(self, src: int, dst: int) -> None:
        self.runner.copy_state(src, dst)           # checks the slots before any rank sees them
        self._step(lambda: self.group.broadcast(P.header(P.COPY, src, dst)))

    def trim_state(self, slots: list[int]) -> None:
        self._send_ids(P.TRIM_STATES, slots)
        if slots and not self.down:
            self.runner.trim_state(slots)

    def allocate_kv(self, num_blocks: int, block_size: int) -> None:
        self._step(lambda: self.group.broadcast(P.header(P.ALLOCATE, num_blocks, block_size)))
        self.runner.allocate_kv(num_blocks, block_size)

    def trim_kv(self, blocks: list[int]) -> None:
        self._send_ids(P.TRIM, blocks)
        if blocks and not self.down:
            self.runner.trim_kv(blocks)

    def _send_ids(self, op: int, ids: list[int]) -> None:
        """A TRIM command: memory given back, so a rank that is down is only logged (the next
        request is refused)."""
        if not ids or self.down:
            return

        def send() -> None:
            self.group.broadcast(P.header(op, len(ids)))
            self.group.broadcast(torch.tensor(ids, dtype=torch.int32))
        try:
            self._step(send)
        except RanksFailed:
            pass

    def forward(self, tokens: list[int], segments: list[Segment], out_rows: list[int],
                draws: list[D.Draw | None] | None = None) -> Any:
        """Without `draws`: fp32 logits [len(out_rows), vocab], gathered.  With them (per out
        row: its sampling settings, its reply position and its rules as constraints.for_shards
        gives them, or None for a row whose rules are of another kind): (rows, tokens):
        tokens[i] the keyed draw made across the ranks (draws.py), or None where rows[i] holds
        the whole logits, as the forward gave them, to apply the row's rules to and draw from."""
        arrays, images = self.runner.inputs(tokens, segments, out_rows)    # checked before any rank sees them
        plans, banned, edits = D.plans_of(draws or [None] * len(out_rows))

        def step() -> D.Exchanged:
            g = self.group
            sent, gathers = g.bytes_sent, g.gathers
            P.send_forward(g, arrays, images, plans, banned, edits)
            ex = D.exchange(g, self.runner.model.forward(*arrays, **images), self._vocab, plans, banned, edits)
            self.last_step = (g.gathers - gathers, g.bytes_sent - sent)
            return ex
        ex = self._step(step)
        if draws is None:
            return np.stack([ex.whole[i] for i in range(len(out_rows))])
        drawn: list[int | None] = []
        for i, d in enumerate(draws):
            if i in ex.greedy:
                drawn.append(ex.greedy[i])
            elif i in ex.picks:
                drawn.append(merge_draw(ex.picks[i], d[0], d[1]))
            else:
                drawn.append(None)
        return [ex.whole.get(i) for i in range(len(out_rows))], drawn

    def close(self) -> None:
        """Stop the other ranks (they exit) and wait for them."""
        self._closing = True
        if not self.down:
            try:
                self.group.broadcast(P.header(P.STOP))
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        for proc in self._followers:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.group.close(failed=self.down is not None)

    # -- faults ---------------------------------------------------------------------
    def _step(self, fn: Callable[[], T]) -> T:
        if self.down:
            raise RanksFailed(self.down)
        try:
            return fn()
        except Exception as exc:
            cause = self.group.error or exc
            self.group.error = None
            self._fail(f"the ranks are out of step ({type(cause).__name__}: {cause}); restart the server")
            raise RanksFailed(self.down) from exc

    def _fail(self, why: str) -> None:
        if self.down is None:
            self.down = why
            log.error("ranks down: %s", why)

    def _watch(self, rank: int, proc: subprocess.Popen) -> None:
        code = proc.wait()
        if not self._closing:
            self._fail(f"rank {rank} exited with code {code}; restart the server")
