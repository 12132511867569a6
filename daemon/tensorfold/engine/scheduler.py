"""Which sequences run in the next round.

This slice serves one request at a time: a single lane, taken by the oldest
waiting foreground request, else the oldest background one.
"""

from __future__ import annotations

from collections import deque

from .sequence import Sequence
from .types import Priority


class Scheduler:
    def __init__(self, lanes: int = 1) -> None:
        self.lanes = lanes
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def drop_aborted(self) -> list[Sequence]:
        """Remove sequences whose client left; a waiting one never starts."""
        gone = [s for s in (*self.waiting, *self.running) if s.aborted]
        if gone:
            self.waiting = deque(s for s in self.waiting if not s.aborted)
            self.running = [s for s in self.running if not s.aborted]
        return gone

    def admit(self) -> list[Sequence]:
        """Move waiting sequences into free lanes, foreground first; return the admitted ones."""
        admitted = []
        while self.waiting and len(self.running) < self.lanes:
            fg = next((s for s in self.waiting if s.request.priority == Priority.FOREGROUND), None)
            seq = fg or self.waiting[0]
            self.waiting.remove(seq)
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def retire(self, seq: Sequence) -> None:
        self.running.remove(seq)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running
