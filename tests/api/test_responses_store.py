"""The bounded in-memory response store (tensorfold.store.MemoryStore)."""

from __future__ import annotations

import threading

import pytest

from tensorfold.store import DEFAULT_MAX_BYTES, DEFAULT_MAX_COUNT, MemoryStore, ResponseStore, StoredResponse


def record(n: int, pad: int = 0) -> StoredResponse:
    rid = f"resp_{n}"
    return StoredResponse(rid, {"id": rid, "output": [], "pad": "x" * pad},
                          [{"type": "message", "role": "user", "content": f"turn {n}"}])


def ids(records: list[StoredResponse]) -> list[str]:
    return [r.id for r in records]


def test_defaults_are_the_documented_bounds():
    store: ResponseStore = MemoryStore()
    assert (store.max_count, store.max_bytes) == (DEFAULT_MAX_COUNT, DEFAULT_MAX_BYTES) == (1024, 256 * 1024 * 1024)


def test_put_get_delete():
    store = MemoryStore()
    assert store.put(record(1))
    got = store.get("resp_1")
    assert got is not None and got.response == {"id": "resp_1", "output": [], "pad": ""}
    assert got.history == [{"type": "message", "role": "user", "content": "turn 1"}]
    assert got.size > 0 and store.bytes == got.size
    assert store.get("resp_2") is None
    assert store.delete("resp_1") is True
    assert store.delete("resp_1") is False
    assert store.get("resp_1") is None and len(store) == 0 and store.bytes == 0


def test_evicts_the_oldest_by_count():
    store = MemoryStore(max_count=3)
    for n in range(5):
        store.put(record(n))
    assert len(store) == 3
    assert [store.get(f"resp_{n}") is not None for n in range(5)] == [False, False, True, True, True]


def size_of(r: StoredResponse) -> int:
    probe = MemoryStore()
    probe.put(r)
    return probe.bytes


def test_evicts_the_oldest_by_bytes():
    size = size_of(record(0, pad=10_000))
    store = MemoryStore(max_bytes=3 * size + size // 2)
    for n in range(5):
        store.put(record(n, pad=10_000))
    assert len(store) == 3 and store.bytes == 3 * size
    assert store.get("resp_1") is None and store.get("resp_2") is not None
    store.put(record(9, pad=25_000))      # about 2.5 records: two more go
    assert ids(store.page(10)[0]) == ["resp_9", "resp_4"]
    assert store.bytes <= store.max_bytes


def test_a_response_larger_than_the_store_is_not_kept_and_evicts_nothing():
    store = MemoryStore(max_bytes=size_of(record(1)) + 500)
    assert store.put(record(1))
    assert store.put(record(2, pad=600)) is False
    assert ids(store.page(10)[0]) == ["resp_1"]


def test_the_store_counts_the_memory_it_holds():
    """Many small items (the shape that took 35 bytes of memory per JSON byte when kept as
    Python objects): what the store counts covers what it allocates."""
    import tracemalloc

    history = [{"type": "message", "role": "user", "content": f"m{i}"} for i in range(20_000)]
    store = MemoryStore()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(5):
        store.put(StoredResponse(f"resp_{n}", {"id": f"resp_{n}", "output": []}, history, {"id": f"resp_{n}"}))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert store.bytes >= held > 0, (store.bytes, held)
    got = store.get("resp_3")
    assert got is not None and got.history == history and got.history is not history


def test_putting_an_id_again_replaces_it_as_the_newest():
    store = MemoryStore(max_count=2)
    store.put(record(1))
    store.put(record(2))
    store.put(record(1, pad=10))
    assert ids(store.page(10)[0]) == ["resp_1", "resp_2"]
    store.put(record(3))
    assert ids(store.page(10)[0]) == ["resp_3", "resp_1"]
    assert store.bytes == sum(r.size for r in store.page(10)[0])


def test_pages_newest_first_with_after():
    store = MemoryStore()
    for n in range(5):
        store.put(record(n))
    page, more = store.page(2)
    assert ids(page) == ["resp_4", "resp_3"] and more
    page, more = store.page(2, after="resp_3")
    assert ids(page) == ["resp_2", "resp_1"] and more
    page, more = store.page(2, after="resp_1")
    assert ids(page) == ["resp_0"] and not more
    assert store.page(2, after="resp_0") == ([], False)
    assert store.page(2, after="resp_unknown") == ([], False)
    assert ids(store.page(5)[0]) == ["resp_4", "resp_3", "resp_2", "resp_1", "resp_0"]
    assert store.page(5)[1] is False


def test_a_deleted_or_evicted_cursor_still_resumes():
    store = MemoryStore(max_count=4)
    for n in range(4):
        store.put(record(n))
    store.delete("resp_2")
    assert ids(store.page(10, after="resp_2")[0]) == ["resp_1", "resp_0"]
    store.put(record(4))
    store.put(record(5))                 # evicts resp_0
    store.put(record(6))                 # evicts resp_1
    assert ids(store.page(10)[0]) == ["resp_6", "resp_5", "resp_4", "resp_3"]
    assert ids(store.page(10, after="resp_2")[0]) == []
    store.delete("resp_5")
    assert ids(store.page(10, after="resp_5")[0]) == ["resp_4", "resp_3"]
    assert store.page(10, after="resp_1") == ([], False)


def test_bounds_must_leave_room():
    with pytest.raises(ValueError):
        MemoryStore(max_count=0)
    with pytest.raises(ValueError):
        MemoryStore(max_bytes=0)


def test_concurrent_puts_keep_the_bounds():
    store = MemoryStore(max_count=50, max_bytes=20_000)

    def worker(base: int) -> None:
        for n in range(200):
            store.put(record(base + n, pad=n % 300))
            store.get(f"resp_{base + n - 3}")
            store.page(5)
            if n % 7 == 0:
                store.delete(f"resp_{base + n - 1}")

    threads = [threading.Thread(target=worker, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kept = store.page(100)[0]
    assert len(kept) == len(store) <= 50
    assert store.bytes == sum(r.size for r in kept) <= 20_000
