"""`tensorfold-tui`: a keyboard-first terminal client of the daemon's HTTP API.

Three tabs: Rates (plots of the /health rates and the running requests),
Responses (the stored responses: browse, view, delete) and Daemon (the served
model, the engine and, for a daemon on this machine, start / stop / restart
with a model picker and the log tail). /health is polled on a timer in a
worker thread, so a slow or absent daemon never blocks the screen."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from tensorfold.client import Supervisor, cached_models
from tensorfold.client.http import DEFAULT_URL, DaemonClient, DaemonError

from .daemon_view import DaemonView
from .data import RateHistory, Snapshot, fmt_duration, is_local, take_snapshot, url_host
from .rates import RatesView
from .responses import ResponseScreen, ResponsesView
from .screens import ConfirmScreen, ModelPicker

STATE_STYLES = {"serving": "bold green", "busy": "bold yellow", "starting": "bold cyan",
                "stopped": "dim", "error": "bold red", "unreachable": "bold red"}
TABS = ("rates", "responses", "daemon")
RESPONSES_TAB_ACTIONS = ("view", "delete", "more")
DAEMON_ACTIONS = ("start", "stop", "restart", "model")
OWN_ACTIONS = ("show_tab", *RESPONSES_TAB_ACTIONS, *DAEMON_ACTIONS)


class TensorFoldApp(App[None]):
    CSS_PATH = "tensorfold.tcss"
    TITLE = "TensorFold"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("1", "show_tab('rates')", "rates"),
        Binding("2", "show_tab('responses')", "responses"),
        Binding("3", "show_tab('daemon')", "daemon"),
        Binding("r", "refresh", "refresh"),
        Binding("enter", "view", "view"),
        Binding("d", "delete", "delete"),
        Binding("n", "more", "more"),
        Binding("s", "start", "start"),
        Binding("x", "stop", "stop"),
        Binding("R", "restart", "restart"),
        Binding("m", "model", "model"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, *,
                 supervisor: Supervisor | None | str = "auto", poll_interval: float | None = 1.0,
                 clock: Callable[[], float] = time.monotonic,
                 list_models: Callable[[], list[Any]] = cached_models,
                 serve_args: list[str] | None = None, page_size: int = 50, log_lines: int = 200) -> None:
        super().__init__()
        self.url = url.rstrip("/").removesuffix("/v1")
        self.client = DaemonClient(self.url, api_key=api_key, timeout=10.0)
        if supervisor == "auto":
            supervisor = Supervisor(self.url, api_key=api_key) if is_local(self.url) else None
        self.supervisor: Supervisor | None = supervisor if isinstance(supervisor, Supervisor) else None
        self.local = self.supervisor is not None and is_local(self.url)
        self.poll_interval = poll_interval
        self.clock = clock
        self.list_models = list_models
        self.serve_args = serve_args
        self.page_size = page_size
        self.log_lines = log_lines
        self.history = RateHistory()
        self.snapshot: Snapshot | None = None
        self.chosen: str | None = None
        self.running_action: str | None = None
        self.message = ""
        self.responses_after: str | None = None
        self.responses_more = False
        self._polling = False

    # -- layout ----------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(self.header_text(), id="header")
        with TabbedContent(initial="rates", id="tabs"):
            with TabPane("1 Rates", id="rates"):
                yield RatesView(id="rates-view")
            with TabPane("2 Responses", id="responses"):
                yield ResponsesView(id="responses-view")
            with TabPane("3 Daemon", id="daemon"):
                yield DaemonView(self.url, self.local, id="daemon-view")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        if self.poll_interval:
            self.set_interval(self.poll_interval, self.poll)
            self.poll()

    def on_unmount(self) -> None:
        self.client.close()

    @property
    def active_tab(self) -> str:
        return self.query_one("#tabs", TabbedContent).active

    def header_text(self) -> Text:
        snap = self.snapshot
        state = snap.state if snap else "connecting"
        text = Text()
        text.append(" TensorFold ", style="bold reverse")
        text.append(f"  {(snap.model if snap else None) or '-'}  ", style="bold")
        text.append(f"● {state}", style=STATE_STYLES.get(state, ""))
        text.append(f"  {'local' if is_local(self.url) else url_host(self.url)}")
        if snap is not None and snap.health is not None:
            text.append(f"  up {fmt_duration(snap.health.get('uptime_seconds'))}")
        if self.running_action:
            text.append(f"  {self.running_action}…", style="bold cyan")
        return text

    # -- polling ---------------------------------------------------------------

    def poll(self) -> None:
        """Read /health (and the supervisor's state) in a worker thread, unless a read is under way."""
        if self._polling:
            return
        self._polling = True
        want_log = self.log_lines if self.local and self.active_tab == "daemon" else 0
        self.run_worker(lambda: self._poll_thread(want_log), thread=True, group="poll", exit_on_error=False)

    def _poll_thread(self, log_lines: int) -> None:
        try:
            snap = take_snapshot(self.client, self.supervisor, self.clock(), log_lines)
        except Exception as exc:  # never leave the poll flag set
            snap = Snapshot(self.clock(), None, f"poll failed: {exc}")
        try:
            self.call_from_thread(self.apply_snapshot, snap)
        except RuntimeError:  # the app closed while the daemon was being asked
            pass

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Show one poll's result (tests feed fixed snapshots here with polling off)."""
        self._polling = False
        self.snapshot = snap
        if snap.health is not None:
            self.history.add(snap.health, snap.at)
        else:
            self.history.rebase()
        self.refresh_views()

    def refresh_views(self) -> None:
        snap = self.snapshot
        self.query_one("#header", Static).update(self.header_text())
        now = self.history.times[-1] if len(self.history) else (snap.at if snap else 0.0)
        self.query_one(RatesView).show(snap.health if snap else None, self.history, now)
        self.query_one(DaemonView).show(snap, self.chosen, self.message)

    # -- tabs ------------------------------------------------------------------

    def action_show_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.refresh_bindings()
        if self.active_tab == "responses":
            self.load_responses()
            self.query_one("#responses-table", DataTable).focus()
        elif self.active_tab == "daemon":
            self.poll()

    def action_refresh(self) -> None:
        self.message = ""
        self.poll()
        if self.active_tab == "responses":
            self.load_responses()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if len(self.screen_stack) > 1 and action in (*OWN_ACTIONS, "refresh"):
            return False  # a modal screen is up: its own keys only
        if action in RESPONSES_TAB_ACTIONS:
            return self.active_tab == "responses" and (action != "more" or self.responses_more)
        if action in DAEMON_ACTIONS:
            if not self.local or self.active_tab != "daemon":
                return False
            return None if self.running_action else True
        return True

    # -- responses -------------------------------------------------------------

    def load_responses(self, more: bool = False) -> None:
        after = self.responses_after if more else None
        self.run_worker(lambda: self._responses_thread(after), thread=True, group="responses",
                        exclusive=True, exit_on_error=False)

    def _responses_thread(self, after: str | None) -> None:
        try:
            page = self.client.responses(limit=self.page_size, after=after)
            rows, more, last, error = page.get("data", []), bool(page.get("has_more")), page.get("last_id"), ""
        except DaemonError as exc:
            rows, more, last, error = [], False, None, f"the stored responses could not be read: {exc}"
        try:
            self.call_from_thread(self._show_responses, rows, more, last, error, after is not None)
        except RuntimeError:
            pass

    def _show_responses(self, rows: list[dict], more: bool, last: str | None, error: str, append: bool) -> None:
        self.responses_after, self.responses_more = last, more
        self.query_one(ResponsesView).show(rows, more, error, append)
        self.refresh_bindings()

    def action_more(self) -> None:
        self.load_responses(more=True)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_view()

    def action_view(self) -> None:
        response_id = self.query_one(ResponsesView).selected_id()
        if response_id is None:
            return
        screen = ResponseScreen(response_id)
        self.push_screen(screen)
        self.run_worker(lambda: self._view_thread(screen), thread=True, group="view", exit_on_error=False)

    def _view_thread(self, screen: ResponseScreen) -> None:
        try:
            response = self.client.response(screen.response_id)
            inputs, error = self.client.input_items(screen.response_id), ""
        except DaemonError as exc:
            response, inputs, error = None, [], str(exc)
        try:
            self.call_from_thread(screen.show, response, inputs, error)
        except RuntimeError:
            pass

    def action_delete(self) -> None:
        response_id = self.query_one(ResponsesView).selected_id()
        if response_id is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.run_worker(lambda: self._delete_thread(response_id), thread=True, group="delete",
                                exit_on_error=False)

        self.push_screen(ConfirmScreen(f"Delete the stored response {response_id}?"), answered)

    def _delete_thread(self, response_id: str) -> None:
        try:
            self.client.delete_response(response_id)
            note = f"deleted {response_id}"
        except DaemonError as exc:
            note = f"could not delete {response_id}: {exc}"
        try:
            self.call_from_thread(self.notify, note, severity="information" if note.startswith("deleted") else "error")
            self.call_from_thread(self.load_responses)
        except RuntimeError:
            pass

    # -- the local daemon ------------------------------------------------------

    def action_start(self) -> None:
        self._supervise("starting", lambda sup: sup.start(self.chosen, self.serve_args), uses_choice=True)

    def action_stop(self) -> None:
        self._supervise("stopping", lambda sup: sup.stop())

    def action_restart(self) -> None:
        self._supervise("restarting", lambda sup: sup.restart(self.chosen, self.serve_args), uses_choice=True)

    def action_model(self) -> None:
        current = self.chosen or (self.snapshot.model if self.snapshot else None)

        def picked(model: str | None) -> None:
            if model:
                self.chosen = model
                self.message = f"chosen: {model} · s starts it, R restarts with it"
                self.refresh_views()

        self.push_screen(ModelPicker(self.list_models, current), picked)

    def _supervise(self, doing: str, act: Callable[[Supervisor], object], uses_choice: bool = False) -> None:
        supervisor = self.supervisor
        if supervisor is None or self.running_action:
            return
        self.running_action = doing
        self.message = f"{doing}…"
        self.query_one(DaemonView).set_busy(True)
        self.refresh_bindings()
        self.refresh_views()

        def run() -> None:
            try:
                act(supervisor)
                error = ""
            except Exception as exc:  # SupervisorError, a service manager's failure, a bad path
                error = str(exc) or type(exc).__name__
            try:
                self.call_from_thread(self._supervised, doing, error, uses_choice)
            except RuntimeError:
                pass

        self.run_worker(run, thread=True, group="supervise", exit_on_error=False)

    def _supervised(self, doing: str, error: str, uses_choice: bool) -> None:
        self.running_action = None
        self.query_one(DaemonView).set_busy(False)
        if error:
            self.message = f"{doing} failed: {error}"
            self.notify(error, title=f"{doing} failed", severity="error")
        else:
            self.message = ""
            if uses_choice:
                self.chosen = None
        self.refresh_bindings()
        self.refresh_views()
        self.history.rebase()
        self.poll()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tensorfold-tui", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL,
                        help=f"the daemon's address (default {DEFAULT_URL})")
    parser.add_argument("--api-key", default=None,
                        help="the daemon's API key, when it was started with --api-key")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between /health polls")
    args = parser.parse_args(argv)
    TensorFoldApp(args.url, args.api_key, poll_interval=max(0.2, args.interval)).run()


if __name__ == "__main__":
    main()
