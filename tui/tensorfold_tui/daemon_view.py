"""The Daemon tab: what /health says about the served model and the engine,
the supervisor's state, and, when the daemon runs on this machine, the start /
stop / restart / model controls and the tail of the daemon's log. A remote
daemon gets a note instead of the controls."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, RichLog, Static

from .data import Snapshot, fmt_duration, url_host

CONTROLS = (("start", "Start s", "success"), ("stop", "Stop x", "error"),
            ("restart", "Restart R", "warning"), ("model", "Model m", "primary"))


def info_table(snap: Snapshot | None, url: str, chosen: str | None) -> Table:
    """Two columns of label / value pairs (fits 80 columns)."""
    health = (snap.health if snap else None) or {}
    status = snap.status if snap else None
    streams = health.get("streams") or {}
    state = snap.state if snap else "…"
    if status is not None and status.managed_by:
        state += f" ({status.managed_by}{f', pid {status.pid}' if status.pid else ''})"
    aliases = ", ".join(health.get("aliases") or []) or "-"
    left = [
        ("model", (snap.model if snap else None) or "-"),
        ("aliases", aliases),
        ("state", state),
        ("url", url),
        ("uptime", fmt_duration(health.get("uptime_seconds")) if health else "-"),
    ]
    right = [
        ("engine", health.get("engine", "-")),
        ("context", f"{health['context_length']} tokens" if "context_length" in health else "-"),
        ("parallel", f"{health.get('parallel', '-')} lanes, {streams.get('maximum', '-')} streams"
         if health else "-"),
        ("drafter", str(health.get("drafter") or "-")),
        ("version", health.get("version", "-")),
    ]
    if chosen:
        left.append(("next", f"{chosen} (used by the next start or restart)"))
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(ratio=1, overflow="ellipsis", no_wrap=True)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(ratio=1, overflow="ellipsis", no_wrap=True)
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ("", "")
        b = right[i] if i < len(right) else ("", "")
        table.add_row(a[0], str(a[1]), b[0], str(b[1]))
    return table


class DaemonView(Vertical):
    """Facts about the daemon, then the controls (local) or a note (remote), then the log."""

    def __init__(self, url: str, local: bool, **kwargs) -> None:
        super().__init__(**kwargs)
        self.url = url
        self.local = local
        self.log_lines: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static(info_table(None, self.url, None), id="daemon-info")
        if self.local:
            with Horizontal(id="controls"):
                for action, label, variant in CONTROLS:
                    yield Button(label, variant=variant, id=f"btn-{action}", action=f"app.{action}",
                                 compact=True)
            yield Static("", id="daemon-message")
            log = RichLog(id="daemon-log", max_lines=500, wrap=True, min_width=20, markup=False, highlight=False)
            log.border_title = "log tail"
            yield log
        else:
            yield Static(Text(
                f"The daemon at {url_host(self.url)} is not on this machine: start, stop, restart and "
                "the log work only for a daemon on a loopback address (127.0.0.1, ::1, localhost). "
                "Run tensorfold-tui where the daemon runs, over SSH.", style="italic"), id="remote-note")
            yield Static("", id="daemon-message")

    def show(self, snap: Snapshot | None, chosen: str | None, message: str = "") -> None:
        self.query_one("#daemon-info", Static).update(info_table(snap, self.url, chosen))
        if snap is not None and not message:
            if snap.status is not None and snap.status.message:
                message = snap.status.message
            elif snap.health is None:
                message = "no answer from the daemon" + (" (it is stopped)" if snap.state == "stopped" else "")
        self.query_one("#daemon-message", Static).update(message)
        if self.local and snap is not None and snap.log is not None and snap.log != self.log_lines:
            self.log_lines = list(snap.log)
            log = self.query_one("#daemon-log", RichLog)
            log.clear()
            for line in self.log_lines or ["(the log is empty)"]:
                log.write(Text(line))

    def set_busy(self, busy: bool) -> None:
        for button in self.query(Button):
            button.disabled = busy
