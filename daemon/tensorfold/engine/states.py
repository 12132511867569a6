"""The recurrent-state slots of a hybrid model (slot bookkeeping only; the states
live in the backend).

A running sequence owns one slot: the state after its last computed position.
A verify round gives each drafted row a scratch slot for the state after it; once
the draws are taken, the slot after the last kept row becomes the sequence's and
the others go back, so rejected drafts leave no trace and nothing is copied.
The prefix cache keeps snapshots (plan_snapshots): a copy of a sequence's state at
the last block boundary of its prompt (engine/cache.py), the least recently used
going first.
"""

from __future__ import annotations

FRESH = -1          # no slot: a row's source at position 0 (the zero state); a sequence without one
SCRATCH_PER_LANE = 4
SNAPSHOT_SHARE = 0.25          # of the memory budget, at most, for the prefix cache's snapshots
MAX_SNAPSHOTS = 1024


def state_bytes(backend) -> int:
    """A backend's bytes per state slot: more than 0 for a hybrid model's, else 0 (backends
    without recurrent state have no state_bytes)."""
    return getattr(backend, "state_bytes", lambda: 0)()


def state_slots(lanes: int, snapshots: int) -> int:
    """Slots for `lanes` sequences, their drafted rows (a verify drafts as far as scratch
    slots are free) and the prefix cache's snapshots."""
    return lanes * (1 + SCRATCH_PER_LANE) + snapshots


def plan_snapshots(lanes: int, state_bytes: int, budget_bytes: int) -> int:
    """How many snapshots the prefix cache keeps: a share of the memory budget, at least
    one per lane."""
    return max(lanes, min(MAX_SNAPSHOTS, int(budget_bytes * SNAPSHOT_SHARE) // max(1, state_bytes)))


class StatePool:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._free = list(range(slots - 1, -1, -1))
        self._written: set[int] = set()       # handed out since their pages were last returned

    @property
    def available(self) -> int:
        return len(self._free)

    def take(self, n: int = 1) -> list[int]:
        """Up to n free slots (fewer when fewer are free)."""
        n = min(n, len(self._free))
        out = self._free[len(self._free) - n:][::-1]
        del self._free[len(self._free) - n:]
        self._written.update(out)
        return out

    def give(self, slots: list[int]) -> None:
        self._free.extend(s for s in slots if s != FRESH)

    def take_trimmable(self) -> list[int]:
        """Free slots written since they were last trimmed: their memory can go back."""
        out = sorted(self._written.intersection(self._free))
        self._written.difference_update(out)
        return out
