"""A hybrid's state slots and the prefix cache's snapshots (bookkeeping only)."""

from __future__ import annotations

from tensorfold.engine.cache import BlockCache
from tensorfold.engine.states import StatePool, plan_snapshots, state_slots

B = 4


def test_pool_takes_what_is_free_and_trims_what_was_written():
    pool = StatePool(3)
    a = pool.take(2)
    assert len(a) == 2 and pool.available == 1
    assert pool.take(5) == [x for x in range(3) if x not in a]       # fewer than asked: all that is free
    assert pool.take(1) == [] and pool.available == 0
    pool.give([a[0], -1])                                             # FRESH is not a slot
    assert pool.available == 1
    assert pool.take_trimmable() == [a[0]] and pool.take_trimmable() == []


def test_snapshot_plan_is_a_share_of_memory_at_least_one_per_lane():
    assert plan_snapshots(8, state_bytes=20 << 20, budget_bytes=1 << 30) == 12
    assert plan_snapshots(8, state_bytes=20 << 20, budget_bytes=100 << 20) == 8
    assert plan_snapshots(8, state_bytes=4096, budget_bytes=1 << 40) == 1024
    assert state_slots(8, 12) == 8 * 5 + 12


def _cached(cache: BlockCache, tokens: list[int]) -> list[int]:
    """Blocks of `tokens` registered in the cache and released (idle); their content ids."""
    blocks = cache.allocate(len(tokens) // B)
    cid, cids = 0, []
    for i, b in enumerate(blocks):
        cid = cache.register(b, cid, tokens[i * B:(i + 1) * B])
        cids.append(cid)
    cache.release(blocks)
    return cids


def test_match_with_snapshots_ends_at_the_longest_prefix_with_one():
    cache = BlockCache(16, B)
    tokens = list(range(20))
    cids = _cached(cache, tokens)
    assert len(cache.match(tokens, 5)[0]) == 5
    blocks, cid = cache.match(tokens, 5, snapshots=True)
    assert blocks == [] and cid == 0                          # no snapshot: nothing to resume from
    cache.attach(cids[1], slot=7)
    cache.attach(cids[3], slot=9)
    blocks, cid = cache.match(tokens, 5, snapshots=True)
    assert len(blocks) == 4 and cid == cids[3] and cache.snapshot(cid) == 9
    blocks, cid = cache.match(tokens, 3, snapshots=True)      # the limit cuts before the longer one
    assert len(blocks) == 2 and cache.snapshot(cid) == 7


def test_snapshots_go_with_their_blocks_or_least_recently_used_first():
    cache, dropped = BlockCache(5, B), []
    cache.on_drop = dropped.append
    cids = _cached(cache, list(range(8)))
    cache.attach(cids[0], 1)
    cache.attach(cids[1], 2)
    cache.release(cache.match(list(range(8)), 2, snapshots=True)[0])    # uses (refreshes) the longer one
    assert cache.drop_snapshot(keep=cids[0]) and dropped == [2]
    assert not cache.drop_snapshot(keep=cids[0])
    cache.allocate(5)                                          # evicts every idle block: its snapshot goes too
    assert dropped == [2, 1] and cache.snapshots == 0
