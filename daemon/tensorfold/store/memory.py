"""A bounded, thread-safe, in-memory store of finished responses.

The store keeps the newest responses: at most `max_count` of them and at most
`max_bytes` of memory; putting one more evicts the oldest until both bounds
hold again. A response larger than `max_bytes` on its own is not kept (put
returns False).

A record is held as its compact UTF-8 JSON (the response body plus the
conversation it continues), so the memory it takes is what it counts: those
bytes, its listing row and RECORD_OVERHEAD for the bookkeeping around them.
(Held as Python objects, 28.6 MB of JSON took about 1 GB.) `get` decodes a
fresh copy each time.

Listing (`page`) goes newest first with an `after` cursor and reads only the
rows (`summary`, a small dict the caller gives at put). A cursor whose
response has since been deleted or evicted still resumes where it was: the
store remembers the position of the last `max_count` ids it let go.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

DEFAULT_MAX_COUNT = 1024
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
RECORD_OVERHEAD = 2048      # bytes per record besides its JSON: the row, the entry, the id, the bytes object


@dataclass(frozen=True, slots=True)
class StoredResponse:
    id: str
    response: dict[str, Any]           # the Response object as the client got it
    history: list[dict[str, Any]]      # conversation items before its output (no instructions)
    summary: dict[str, Any] = field(default_factory=dict, compare=False)   # its listing row
    size: int = field(default=0, compare=False)   # bytes held; the store measures it


@dataclass(frozen=True, slots=True)
class Listed:
    """One row of a page: the response's id, the summary given at put, its size."""

    id: str
    summary: dict[str, Any]
    size: int


@dataclass(frozen=True, slots=True)
class _Entry:
    position: int
    blob: bytes                        # [response, history] as compact UTF-8 JSON
    summary: dict[str, Any]
    size: int


class ResponseStore(Protocol):
    def put(self, record: StoredResponse) -> bool: ...
    def get(self, response_id: str) -> StoredResponse | None: ...
    def delete(self, response_id: str) -> bool: ...
    def page(self, limit: int, after: str | None = None) -> tuple[list[Listed], bool]: ...
    def __len__(self) -> int: ...


class MemoryStore:
    def __init__(self, max_count: int = DEFAULT_MAX_COUNT, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_count < 1 or max_bytes < 1:
            raise ValueError("a response store needs room for at least one response")
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._records: OrderedDict[str, _Entry] = OrderedDict()  # oldest first
        self._gone: OrderedDict[str, int] = OrderedDict()    # let-go id -> its position
        self._next = 0
        self._bytes = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes

    def put(self, record: StoredResponse) -> bool:
        """Keep `record` (replacing one with the same id), evicting the oldest
        until both bounds hold. False when it alone exceeds max_bytes."""
        blob = json.dumps([record.response, record.history], ensure_ascii=False,
                          separators=(",", ":")).encode()
        size = len(blob) + len(json.dumps(record.summary).encode()) + RECORD_OVERHEAD
        if size > self.max_bytes:
            return False
        with self._lock:
            self._drop(record.id)
            self._records[record.id] = _Entry(self._next, blob, record.summary, size)
            self._next += 1
            self._bytes += size
            while len(self._records) > self.max_count or self._bytes > self.max_bytes:
                self._drop(next(iter(self._records)))
            return True

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            entry = self._records.get(response_id)
        if entry is None:
            return None
        response, history = json.loads(entry.blob)
        return StoredResponse(response_id, response, history, entry.summary, entry.size)

    def delete(self, response_id: str) -> bool:
        with self._lock:
            return self._drop(response_id)

    def page(self, limit: int, after: str | None = None) -> tuple[list[Listed], bool]:
        """Up to `limit` rows, newest first, older than `after` when given;
        and whether more follow. An unknown `after` gives an empty page."""
        with self._lock:
            if after is None:
                below = self._next
            elif after in self._records:
                below = self._records[after].position
            else:
                below = self._gone.get(after, -1)
            out: list[Listed] = []
            for response_id, entry in reversed(self._records.items()):
                if entry.position >= below:
                    continue
                if len(out) == limit:
                    return out, True
                out.append(Listed(response_id, entry.summary, entry.size))
            return out, False

    def _drop(self, response_id: str) -> bool:
        entry = self._records.pop(response_id, None)
        if entry is None:
            return False
        self._bytes -= entry.size
        self._gone[response_id] = entry.position
        while len(self._gone) > self.max_count:
            self._gone.popitem(last=False)
        return True
