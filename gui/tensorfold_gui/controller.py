"""The daemon controller: every `Supervisor` call (status polls and the
start / stop / restart / model actions, some of which block for seconds) runs
on one worker thread, one call at a time, so the GUI thread never blocks and
the supervisor is never used from two threads at once.

Results come back through a plain `queue.Queue` that a QTimer on the GUI
thread drains while calls are outstanding (and only then), so the worker
never touches a Qt object and every signal here is emitted on the GUI
thread."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from tensorfold.client import State, Supervisor
from tensorfold.client.supervisor import Status

log = logging.getLogger(__name__)

DEFAULT_POLL_MS = 2000
DELIVER_MS = 50
RUNNING = (State.STARTING, State.SERVING, State.BUSY)

Job = tuple[str, Callable[[], Status]]


class DaemonController(QObject):
    """Polls the daemon's state on a timer and runs actions off the GUI thread."""

    status_changed = Signal(object)      # Status, after every poll and action
    action_started = Signal(str)         # "start", "stop", "restart", "model"
    action_finished = Signal(str, str)   # the action, "" or the error message

    def __init__(self, supervisor: Supervisor, poll_ms: int = DEFAULT_POLL_MS,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.supervisor = supervisor
        self.status: Status = Status(State.STOPPED, supervisor.url, message="not polled yet")
        self.pending: str | None = None        # the action in flight
        self.last_error = ""
        self._poll_queued = False
        self._stopped = False
        self._outstanding = 0
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._results: queue.Queue[tuple[str, Status | None, str]] = queue.Queue()
        self._worker = threading.Thread(target=self._work, name="tensorfold-supervisor", daemon=True)
        self._worker.start()
        self._deliver_timer = QTimer(self)
        self._deliver_timer.setInterval(DELIVER_MS)
        self._deliver_timer.timeout.connect(self._deliver)
        self._poll_timer = QTimer(self)
        self._poll_timer.setInterval(poll_ms)
        self._poll_timer.timeout.connect(self.poll)

    def begin(self) -> None:
        """Poll now, then every `poll_ms`."""
        self.poll()
        self._poll_timer.start()

    def shutdown(self, wait_s: float = 30.0) -> None:
        """Stop polling and wait for the call in flight (the daemon keeps running)."""
        if self._stopped:
            return
        self._stopped = True
        self._poll_timer.stop()
        self._deliver_timer.stop()
        while True:                       # drop what has not started yet
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        self._jobs.put(None)
        self._worker.join(wait_s)

    # -- polling ---------------------------------------------------------------

    def poll(self) -> None:
        if self._poll_queued or self._stopped:
            return
        self._poll_queued = True
        self._submit(("poll", self.supervisor.status))

    # -- actions ---------------------------------------------------------------

    def start(self) -> None:
        self._act("start", lambda: self.supervisor.start())

    def stop(self) -> None:
        self._act("stop", lambda: self.supervisor.stop())

    def restart(self) -> None:
        self._act("restart", lambda: self.supervisor.restart())

    def serve_model(self, model: str) -> None:
        """Serve `model` now: restart with it when running, else start with it."""
        def run() -> Status:
            if self.supervisor.status().state in RUNNING:
                return self.supervisor.restart(model=model)
            return self.supervisor.start(model=model)
        self._act("model", run)

    def can_control(self) -> bool:
        """Whether Stop / Restart apply: a daemon of ours is up (or failed: Stop
        clears the error) and nothing is in flight."""
        return (self.pending is None and self.status.state in (*RUNNING, State.ERROR)
                and self.status.managed_by != "external")

    def can_start(self) -> bool:
        return self.pending is None and self.status.state in (State.STOPPED, State.ERROR)

    def _act(self, name: str, call: Callable[[], Status]) -> None:
        if self._stopped:
            return
        if self.pending is not None:
            log.info("ignoring %s: %s is still running", name, self.pending)
            return
        self.pending = name
        self.action_started.emit(name)
        self._submit((name, call))

    def _submit(self, job: Job) -> None:
        self._outstanding += 1
        self._jobs.put(job)
        if not self._deliver_timer.isActive():
            self._deliver_timer.start()

    # -- the worker thread -----------------------------------------------------

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            kind, call = job
            try:
                status, error = call(), ""
            except Exception as exc:      # a refusal or a service manager failure: shown, not raised
                status, error = None, str(exc) or type(exc).__name__
            self._results.put((kind, status, error))

    # -- back on the GUI thread ------------------------------------------------

    def _deliver(self) -> None:
        while True:
            try:
                kind, status, error = self._results.get_nowait()
            except queue.Empty:
                break
            self._outstanding -= 1
            self._on_result(kind, status, error)
        if self._outstanding <= 0:
            self._deliver_timer.stop()

    def _on_result(self, kind: str, status: Status | None, error: str) -> None:
        if kind == "poll":
            self._poll_queued = False
            if error:
                log.debug("status poll failed: %s", error)
        else:
            self.pending = None
            self.last_error = error
            if error:
                log.warning("%s failed: %s", kind, error)
            self.action_finished.emit(kind, error)
        if status is not None:
            self.status = status
            self.status_changed.emit(status)
        elif kind != "poll":
            self.poll()
