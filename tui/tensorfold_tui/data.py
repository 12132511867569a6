"""What the TUI knows about the daemon at one moment (`Snapshot`), how a worker
thread reads it (`take_snapshot`), the recent history of the rates
(`RateHistory`), and the small text formatters the views share. No Textual
here: these are plain functions the tests can call directly."""

from __future__ import annotations

import ipaddress
import time
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tensorfold.client import RateTracker, Supervisor
from tensorfold.client.http import DaemonClient, DaemonError
from tensorfold.client.supervisor import Status

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def url_host(url: str) -> str:
    return urlsplit(url if "://" in url else f"http://{url}").hostname or ""


def is_local(url: str) -> bool:
    """True when the URL's host is a loopback address (the daemon runs here)."""
    host = url_host(url).lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Snapshot:
    """One poll: the /health body (None when the daemon did not answer), the
    supervisor's view when the daemon is local, and the log tail when read."""

    at: float
    health: dict[str, Any] | None
    error: str = ""
    status: Status | None = None
    log: list[str] | None = None

    @property
    def state(self) -> str:
        if self.status is not None:
            return self.status.state.value
        if self.health is None:
            return "unreachable"
        return "busy" if self.health.get("busy") else "serving"

    @property
    def model(self) -> str | None:
        if self.health is not None:
            return self.health.get("model")
        return self.status.model if self.status is not None else None


def take_snapshot(client: DaemonClient, supervisor: Supervisor | None, now: float,
                  log_lines: int = 0, timeout: float = 2.0) -> Snapshot:
    """Read /health (and the supervisor's state and log when local); never raises."""
    health: dict[str, Any] | None = None
    error = ""
    try:
        health = client.health(timeout=timeout)
    except DaemonError as exc:
        error = str(exc)
    status: Status | None = None
    log: list[str] | None = None
    if supervisor is not None:
        try:
            status = supervisor.status()
        except Exception as exc:  # a service manager that failed to answer
            error = error or f"supervisor: {exc}"
        if log_lines:
            try:
                log = supervisor.log_tail(log_lines)
            except Exception as exc:
                log = [f"(the log could not be read: {exc})"]
    return Snapshot(now, health, error, status, log)


class RateHistory:
    """The rates of the last `keep` samples, differenced by `RateTracker`."""

    def __init__(self, keep: int = 120) -> None:
        self.keep = keep
        self.tracker = RateTracker()
        self.times: deque[float] = deque(maxlen=keep)
        self.values: dict[str, deque[float | None]] = {}
        self.latest: dict[str, float | None] = {}

    def add(self, health: dict[str, Any], now: float) -> bool:
        """Feed one /health body; False when it was only a baseline."""
        rates = self.tracker.sample(health, now)
        if rates is None:
            return False
        self.times.append(now)
        for key, value in rates.items():
            self.values.setdefault(key, deque(maxlen=self.keep)).append(value)
        self.latest = rates
        return True

    def rebase(self) -> None:
        """The daemon went away: the next answer is a new baseline."""
        self.tracker = RateTracker()

    def series(self, key: str, now: float) -> tuple[list[float], list[float]]:
        """(seconds before `now`, values) of one rate, gaps (None) left out."""
        xs: list[float] = []
        ys: list[float] = []
        for t, value in zip(self.times, self.values.get(key, ())):
            if value is not None:
                xs.append(round(t - now, 3))
                ys.append(value)
        return xs, ys

    def __len__(self) -> int:
        return len(self.times)


# -- formatters ----------------------------------------------------------------

def fmt_number(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 10_000:
        return f"{value / 1000:.0f}k"
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}k"
    if abs(value) >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def fmt_rate(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ratio":
        return f"{value * 100:.0f}%"
    return f"{fmt_number(value)} {unit}"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {s:02d}s"
    return f"{s}s"


def fmt_size(size: int | float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def fmt_time(epoch: float | None, now: float | None = None) -> str:
    """A creation time: the clock time today, else the date and time."""
    if not epoch:
        return "-"
    when = time.localtime(epoch)
    today = time.localtime(now if now is not None else time.time())
    if when[:3] == today[:3]:
        return time.strftime("%H:%M:%S", when)
    return time.strftime("%m-%d %H:%M", when)


def one_line(text: str, width: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"
