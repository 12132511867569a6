"""The recurrent-state slots of a hybrid model (slot bookkeeping only; the states
live in the backend).

A running sequence owns one slot: the state after its last computed position.
A verify round gives each drafted row a scratch slot for the state after it; once
the draws are taken, the slot after the last kept row becomes the sequence's and
the others go back, so rejected drafts leave no trace and nothing is copied.
"""

from __future__ import annotations

FRESH = -1          # no slot: a row's source at position 0 (the zero state); a sequence without one
SCRATCH_PER_LANE = 4


def state_slots(lanes: int) -> int:
    """Slots for `lanes` sequences and their drafted rows (a verify drafts as far as
    scratch slots are free)."""
    return lanes * (1 + SCRATCH_PER_LANE)


class StatePool:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._free = list(range(slots - 1, -1, -1))

    @property
    def available(self) -> int:
        return len(self._free)

    def take(self, n: int = 1) -> list[int]:
        """Up to n free slots (fewer when fewer are free)."""
        n = min(n, len(self._free))
        out = self._free[len(self._free) - n:][::-1]
        del self._free[len(self._free) - n:]
        return out

    def give(self, slots: list[int]) -> None:
        self._free.extend(s for s in slots if s != FRESH)

    @property
    def idle(self) -> bool:
        return len(self._free) == self.slots
