"""The Responses store: finished responses kept for GET, DELETE and
previous_response_id (SPEC.md). Memory only: a restart forgets everything."""

from .memory import DEFAULT_MAX_BYTES, DEFAULT_MAX_COUNT, Listed, MemoryStore, ResponseStore, StoredResponse

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_COUNT", "Listed", "MemoryStore", "ResponseStore", "StoredResponse"]
