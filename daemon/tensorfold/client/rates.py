"""Rates from /health counters, the way SPEC.md describes: each sample is
differenced against the one before; the first sample is only a baseline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# name -> (label, unit) of every rate a front end plots
RATES: dict[str, tuple[str, str]] = {
    "decode_tps": ("decode", "tok/s"),
    "prompt_tps": ("prompt", "tok/s"),
    "requests_ps": ("requests", "req/s"),
    "cached_ratio": ("cached", "ratio"),
    "acceptance": ("drafts accepted", "ratio"),
    "running": ("running", "streams"),
    "queued": ("queued", "requests"),
}


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


@dataclass
class RateTracker:
    """Feed it /health bodies with the time they were read; it answers rates."""

    previous: dict[str, Any] | None = None
    previous_time: float = 0.0

    def sample(self, health: dict[str, Any], now: float) -> dict[str, float | None] | None:
        """The rates since the last sample, or None for the first (the baseline)
        and after a counter went backwards (the daemon restarted: a new baseline)."""
        before, then = self.previous, self.previous_time
        self.previous, self.previous_time = health, now
        if before is None or now <= then:
            return None

        def delta(key: str) -> float:
            return float(health.get(key, 0) or 0) - float(before.get(key, 0) or 0)

        keys = ("completion_tokens_total", "prompt_tokens_total", "requests_total")
        if any(delta(k) < 0 for k in keys):
            return None
        seconds = now - then
        return {
            "decode_tps": delta("completion_tokens_total") / seconds,
            "prompt_tps": delta("prompt_tokens_total") / seconds,
            "requests_ps": delta("requests_total") / seconds,
            "cached_ratio": _ratio(delta("cached_tokens_total"), delta("prompt_tokens_total")),
            "acceptance": _ratio(delta("accepted_total"), delta("drafted_total")),
            "running": float(health.get("requests_running", 0) or 0),
            "queued": float(health.get("requests_waiting", 0) or 0),
        }
