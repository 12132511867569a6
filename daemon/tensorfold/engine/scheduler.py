"""Who runs, in which lane, and what the next round does.

Lanes: at most `lanes` sequences are admitted at once, foreground before
background, oldest first within each. A waiting foreground request that finds
no lane (or no memory) takes one from the newest running background request,
which replays later.

Rounds alternate between one prefill chunk (of the first admitted sequence
still prefilling, foreground first) and decode rounds for every sequence
already prefilled. After a chunk that took t seconds, decode rounds run for
decode_share * t before the next chunk; decode_share 0 prefills every prompt
whole before decoding resumes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .sequence import Sequence


@dataclass(slots=True)
class Plan:
    prefill: Sequence | None = None     # one chunk of this sequence's prompt
    decode: list[Sequence] | None = None


class Scheduler:
    def __init__(self, lanes: int, decode_share: float) -> None:
        self.lanes = lanes
        self.decode_share = decode_share
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._decode_credit = 0.0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def requeue(self, seq: Sequence) -> None:
        """A preempted sequence waits again, ahead of later arrivals of its class."""
        self.running.remove(seq)
        self.waiting.appendleft(seq)

    def drop_aborted(self) -> list[Sequence]:
        """Remove sequences whose client left; a waiting one never starts."""
        gone = [s for s in (*self.waiting, *self.running) if s.aborted]
        if gone:
            self.waiting = deque(s for s in self.waiting if not s.aborted)
            self.running = [s for s in self.running if not s.aborted]
        return gone

    def next_waiting(self) -> Sequence | None:
        """The waiting sequence to admit next: the oldest foreground, else the oldest."""
        return next((s for s in self.waiting if not s.background), None) or \
            (self.waiting[0] if self.waiting else None)

    def victim(self) -> Sequence | None:
        """The running background sequence to preempt for a foreground one: the newest."""
        return next((s for s in reversed(self.running) if s.background), None)

    def admit(self, seq: Sequence) -> None:
        self.waiting.remove(seq)
        self.running.append(seq)

    def retire(self, seq: Sequence) -> None:
        self.running.remove(seq)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    @property
    def lane_free(self) -> bool:
        return len(self.running) < self.lanes

    def prefilling(self) -> list[Sequence]:
        pre = [s for s in self.running if not s.prefilled]
        return [s for s in pre if not s.background] + [s for s in pre if s.background]

    def decoding(self) -> list[Sequence]:
        return [s for s in self.running if s.prefilled]

    def plan(self) -> Plan:
        prefill, decode = self.prefilling(), self.decoding()
        if prefill and (not decode or self._decode_credit <= 0):
            return Plan(prefill=prefill[0])
        return Plan(decode=decode) if decode else Plan()

    def spent(self, plan: Plan, seconds: float) -> None:
        """Account a round's time: a chunk earns decode time, decoding spends it."""
        if plan.prefill is not None:
            self._decode_credit = self.decode_share * seconds
        else:
            self._decode_credit -= seconds
