"""Engine totals for /health and /metrics: written by the engine thread only, read by any."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(slots=True)
class Counters:
    requests_running: int = 0
    requests_waiting: int = 0
    requests_total: int = 0
    prompt_tokens_total: int = 0
    cached_tokens_total: int = 0
    completion_tokens_total: int = 0
    prefill_seconds_total: float = 0.0
    decode_seconds_total: float = 0.0
    rounds_total: int = 0
    preemptions_total: int = 0
    drafted_total: int = 0
    accepted_total: int = 0
    streams_decoding: int = 0
    streams_prefilling: int = 0
    streams_maximum: int = 1
    kv_blocks_used: int = 0

    def snapshot(self) -> dict[str, int | float | bool]:
        out: dict[str, int | float | bool] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["busy"] = self.requests_running > 0
        return out
