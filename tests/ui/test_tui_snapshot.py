"""A snapshot of the TUI's main screen (the Rates tab) at 80x24, a real render
of the real app against the live daemon: its real /health body and the
supervisor's real state, with what changes from run to run frozen (polling
off; the uptime, the pid and a fixed series of counters fed at fixed times)."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from tensorfold.client import State
from tensorfold_tui.app import TensorFoldApp
from tensorfold_tui.data import Snapshot

pytestmark = pytest.mark.ui

SAMPLES = 40


def frozen_series(real: dict) -> list[dict]:
    """The live body with the uptime fixed and counters that grow the same way every run."""
    bodies = []
    for i in range(SAMPLES):
        busy = 8 <= i < 30
        bodies.append({
            **real,
            "uptime_seconds": 754.0 + i,
            "busy": busy,
            "requests_running": (1 + i % 2) if busy else 0,
            "requests_waiting": 1 if 14 <= i < 18 else 0,
            "streams": {**(real.get("streams") or {}), "decoding": (1 + i % 2) if busy else 0, "prefilling": 0},
            "requests_total": i // 3,
            "prompt_tokens_total": 40 * (i // 3),
            "cached_tokens_total": 25 * (i // 3),
            "completion_tokens_total": sum(60 + (k % 5) * 12 for k in range(i) if 8 <= k < 30),
            "drafted_total": 10 * i,
            "accepted_total": 7 * i + i % 3,
        })
    return bodies


def test_main_screen(snap_compare, live_daemon):
    real = httpx.get(f"{live_daemon.url}/health", timeout=10).json()
    status = live_daemon.status()
    assert status.state is State.SERVING
    status = dataclasses.replace(status, pid=4242, url="http://127.0.0.1:8080")
    app = TensorFoldApp(live_daemon.url, supervisor=live_daemon, poll_interval=None)

    async def feed(pilot) -> None:
        for i, body in enumerate(frozen_series(real)):
            app.apply_snapshot(Snapshot(1000.0 + i, body, status=status))
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=feed)
