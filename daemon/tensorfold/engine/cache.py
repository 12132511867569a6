"""KV blocks and the prefix cache (block bookkeeping only; the tensors live in the backend).

The KV pool is `num_blocks` blocks of `block_size` positions. A sequence owns a
block table: block i holds its positions i*B .. i*B+B-1. A full block whose KV
has been computed is registered under its content key (the key of the block
before it, and its own tokens), so a later sequence whose tokens begin the same
way reuses it. Blocks no sequence uses stay cached until they are needed,
evicted least recently used first.

A hybrid model's cached prefix also needs the recurrent state after it: a
snapshot (a state slot, engine/states.py) kept under the content id of the
prefix's last block.  For such models a match ends at the longest prefix with
a snapshot; a snapshot goes when its block is evicted (`on_drop` gets its
slot back), or to make room.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

ROOT = 0  # the content id before the first block


@dataclass(slots=True)
class _Cached:
    key: tuple[int, tuple[int, ...]]
    cid: int              # this block's content id (never reused)


class BlockCache:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._refs = [0] * num_blocks
        self._by_key: dict[tuple[int, tuple[int, ...]], int] = {}
        self._meta: dict[int, _Cached] = {}
        self._idle: OrderedDict[int, None] = OrderedDict()   # cached, unused: LRU order
        self._next_cid = ROOT + 1
        self._written: set[int] = set()     # blocks handed out since their pages were last returned
        self._snaps: OrderedDict[int, int] = OrderedDict()   # content id -> state slot, LRU order
        self.on_drop: Callable[[int], None] = lambda slot: None

    # -- capacity --------------------------------------------------------------------
    def blocks_for(self, positions: int) -> int:
        return -(-positions // self.block_size)

    @property
    def available(self) -> int:
        """Blocks a new sequence could get now (free, plus cached ones not in use)."""
        return len(self._free) + len(self._idle)

    @property
    def idle_blocks(self) -> int:
        """Cached blocks that no sequence uses."""
        return len(self._idle)

    @property
    def used(self) -> int:
        return self.num_blocks - self.available

    # -- prefix matching -------------------------------------------------------------
    def match(self, tokens: Sequence[int], limit: int, snapshots: bool = False) -> tuple[list[int], int]:
        """The cached blocks that begin `tokens`, at most `limit` of them; with `snapshots`,
        only as far as the longest such prefix with a state snapshot.

        Returns (block ids, content id of the last one). The blocks are taken
        (referenced) by the caller's sequence.
        """
        blocks, cid, B = [], ROOT, self.block_size
        kept, kept_cid = 0, ROOT
        for i in range(min(limit, len(tokens) // B)):
            block = self._by_key.get((cid, tuple(tokens[i * B:(i + 1) * B])))
            if block is None:
                break
            blocks.append(block)
            cid = self._meta[block].cid
            if cid in self._snaps:
                kept, kept_cid = len(blocks), cid
        if snapshots:
            blocks, cid = blocks[:kept], kept_cid
            if cid in self._snaps:
                self._snaps.move_to_end(cid)
        for b in blocks:
            self._ref(b)
        return blocks, cid

    # -- allocation ------------------------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        """n fresh blocks, evicting idle cached ones (least recently used first)."""
        if n > self.available:
            raise MemoryError(f"{n} KV blocks needed, {self.available} available")
        out = []
        for _ in range(n):
            if self._free:
                b = self._free.pop()
            else:
                b, _ = self._idle.popitem(last=False)
                self._forget(b)
            self._refs[b] = 1
            self._written.add(b)
            out.append(b)
        return out

    def take_trimmable(self) -> list[int]:
        """Free blocks written since they were last trimmed: their memory can go back to
        the system (the next sequence that gets one writes it again)."""
        free = set(self._free)
        out = sorted(b for b in self._written if b in free)
        self._written.difference_update(out)
        return out

    def register(self, block: int, parent_cid: int, tokens: Sequence[int]) -> int:
        """Record that `block` holds the KV of full block `tokens` after `parent_cid`.

        Returns the block's content id (for the next block's key). When another
        block already holds the same content, that one stays the cached copy.
        """
        key = (parent_cid, tuple(tokens))
        owner = self._by_key.get(key)
        if owner is not None:
            return self._meta[owner].cid
        if block in self._meta:            # already registered under another key: keep it
            return self._meta[block].cid
        cid, self._next_cid = self._next_cid, self._next_cid + 1
        self._by_key[key] = block
        self._meta[block] = _Cached(key, cid)
        return cid

    def release(self, blocks: Sequence[int]) -> None:
        """A sequence is done with `blocks`: cached ones go idle, others free."""
        for b in blocks:
            self._refs[b] -= 1
            if self._refs[b] == 0:
                if b in self._meta:
                    self._idle[b] = None
                    self._idle.move_to_end(b)
                else:
                    self._free.append(b)

    def _ref(self, b: int) -> None:
        if self._refs[b] == 0:
            self._idle.pop(b, None)
        self._refs[b] += 1

    def clear_idle(self) -> None:
        """Forget every unused cached block (after --cache-idle seconds without requests; the
        benchmarks and tests use it for a cold cache)."""
        while self._idle:
            b, _ = self._idle.popitem(last=False)
            self._forget(b)
            self._free.append(b)

    def _forget(self, b: int) -> None:
        meta = self._meta.pop(b)
        del self._by_key[meta.key]
        if meta.cid in self._snaps:
            self.on_drop(self._snaps.pop(meta.cid))

    # -- state snapshots (hybrid models) ----------------------------------------------
    def snapshot(self, cid: int) -> int | None:
        """The state slot after the prefix that ends with content id `cid`, if kept."""
        return self._snaps.get(cid)

    @property
    def snapshots(self) -> int:
        return len(self._snaps)

    def attach(self, cid: int, slot: int) -> None:
        """Keep `slot` as the state after the cached prefix ending with content id `cid`."""
        self._snaps[cid] = slot

    def drop_snapshot(self, keep: int = ROOT) -> bool:
        """Give up the least recently used snapshot (not `keep`'s); False when there is none."""
        for cid in self._snaps:
            if cid != keep:
                self.on_drop(self._snaps.pop(cid))
                return True
        return False


def give_back_unused(backend: Any, cache: BlockCache, states: Any = None) -> None:
    """Nothing runs: the pages of the blocks (and a hybrid's state slots, from its
    StatePool `states`) that finished sequences wrote go back to the system."""
    backend.trim_kv(cache.take_trimmable())
    if states is not None:
        backend.trim_state(states.take_trimmable())
