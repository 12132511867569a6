"""Start, stop and restart a local daemon, and tell its state.

The chosen serve settings live in one arguments file (one argument a line,
read by `tensorfold serve @FILE`), so a restart, a launchd agent and a systemd
unit all serve the same model. Without a service manager the daemon runs as a
background process of the supervisor's own (its own session, output appended
to the log file, its pid in the pid file); a stop is SIGTERM (the daemon's
graceful shutdown, api/lifecycle.py), then SIGKILL after a grace period. With an installed
launchd agent or systemd unit, the supervisor drives that instead."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from urllib.parse import urlsplit

from .http import DEFAULT_URL, DaemonClient, DaemonError
from .paths import DaemonPaths
from .services import Service, detect_service, tail


class State(str, Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    SERVING = "serving"
    BUSY = "busy"
    ERROR = "error"


@dataclass(frozen=True)
class Status:
    state: State
    url: str
    pid: int | None = None
    model: str | None = None        # the served model id once it answers, else the chosen one
    managed_by: str | None = None   # "process", "systemd", "launchd", or "external" (not ours)
    message: str = ""


class SupervisorError(Exception):
    pass


def program(script: str, module: str) -> list[str]:
    """The command that runs one of this package's programs in this environment:
    the script beside this interpreter, else on PATH, else `python -m module`."""
    beside = Path(sys.executable).with_name(script)
    if beside.is_file():
        return [str(beside)]
    found = shutil.which(script)
    return [found] if found else [sys.executable, "-m", module]


def serve_command() -> list[str]:
    """The command that runs `tensorfold` (its `serve` follows)."""
    return program("tensorfold", "tensorfold")


def _without(args: list[str], options: tuple[str, ...]) -> list[str]:
    """`args` less each of `options` and the value after it (and blank lines)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif arg.strip():
            out.append(arg)
    return out


def _model_of(args: list[str]) -> str | None:
    return args[args.index("--model") + 1] if "--model" in args[:-1] else None


class Supervisor:
    def __init__(self, url: str = DEFAULT_URL, paths: DaemonPaths | None = None,
                 service: Service | None | str = "auto", api_key: str | None = None,
                 command: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")
        parts = urlsplit(self.url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 8080
        self.paths = paths or DaemonPaths.default()
        self.service = detect_service(self.paths.log_file) if service == "auto" else service
        self.client = DaemonClient(self.url, api_key=api_key, timeout=2.0)
        self.command = command or serve_command()
        self.env = env
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # -- settings --------------------------------------------------------------

    def settings(self) -> list[str]:
        """The serve arguments a start uses (without --host/--port)."""
        try:
            lines = self.paths.args_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        return _without(lines, ("--host", "--port"))

    def chosen_model(self) -> str | None:
        return _model_of(self.settings())

    def choose(self, model: str | None = None, args: list[str] | None = None) -> None:
        """Write the settings: `model` replaces the chosen one (None keeps it),
        `args` replaces the other arguments (None keeps them)."""
        current = self.settings()
        model = model if model is not None else _model_of(current)
        if args is None:
            args = _without(current, ("--model",))
        lines = ["--host", self.host, "--port", str(self.port), *(["--model", model] if model else []), *args]
        self.paths.args_file.parent.mkdir(parents=True, exist_ok=True)
        self.paths.args_file.write_text("\n".join(lines) + "\n")

    # -- state -----------------------------------------------------------------

    def _pid_record(self) -> dict | None:
        try:
            return json.loads(self.paths.pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _alive(self, pid: int) -> bool:
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:                          # a zombie (exited, not yet reaped by its parent) is not alive
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return True

    def _answering(self) -> tuple[State, str | None] | None:
        try:
            health = self.client.health(timeout=1.0)
        except DaemonError:
            return None
        return (State.BUSY if health.get("busy") else State.SERVING), health.get("model")

    def status(self) -> Status:
        if self.service is not None:
            if not self.service.active():
                return Status(State.STOPPED, self.url, model=self.chosen_model(), managed_by=self.service.name)
            seen = self._answering()
            if seen is None:
                return Status(State.STARTING, self.url, model=self.chosen_model(), managed_by=self.service.name)
            return Status(seen[0], self.url, model=seen[1], managed_by=self.service.name)
        record = self._pid_record()
        if record is not None:
            pid = int(record["pid"])
            if not self._alive(pid):
                last = [line for line in tail(self.paths.log_file, 20) if line.strip()]
                reason = last[-1] if last else "no output"
                return Status(State.ERROR, self.url, pid, record.get("model"), "process",
                              f"the daemon exited: {reason}")
            seen = self._answering()
            if seen is None:
                return Status(State.STARTING, self.url, pid, record.get("model"), "process")
            return Status(seen[0], self.url, pid, seen[1], "process")
        seen = self._answering()
        if seen is not None:
            return Status(seen[0], self.url, model=seen[1], managed_by="external")
        return Status(State.STOPPED, self.url, model=self.chosen_model())

    def wait(self, *states: State, timeout: float = 120.0, interval: float = 0.25) -> Status:
        """Poll until the state is one of `states`; raise after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if status.state in states:
                return status
            if time.monotonic() > deadline:
                raise SupervisorError(f"the daemon is {status.state.value}, not {'/'.join(s.value for s in states)}"
                                      f" after {timeout:.0f} s {status.message}".rstrip())
            time.sleep(interval)

    # -- actions ---------------------------------------------------------------

    def start(self, model: str | None = None, args: list[str] | None = None) -> Status:
        """Start the daemon with the chosen settings (changed by `model`/`args`)."""
        status = self.status()
        if status.state not in (State.STOPPED, State.ERROR):
            raise SupervisorError(f"the daemon is already {status.state.value} at {self.url}")
        self.choose(model, args)
        if self.service is not None:
            self.service.start()
            return self.status()
        self.paths.pid_file.unlink(missing_ok=True)
        self.paths.log_file.parent.mkdir(parents=True, exist_ok=True)
        argv = [*self.command, "serve", f"@{self.paths.args_file}"]
        with self.paths.log_file.open("ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n".encode())
            log.flush()
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=self.env)
        self._children[child.pid] = child
        self.paths.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.paths.pid_file.write_text(json.dumps({"pid": child.pid, "url": self.url,
                                                   "model": self.chosen_model(), "started": time.time()}))
        return self.status()

    def stop(self, grace: float = 15.0) -> Status:
        """Stop the daemon: SIGTERM, then SIGKILL after `grace` seconds."""
        if self.service is not None:
            self.service.stop()
            return self.status()
        record = self._pid_record()
        if record is None:
            status = self.status()
            if status.managed_by == "external":
                raise SupervisorError(f"the daemon at {self.url} was not started here; stop it where it runs")
            return status
        pid = int(record["pid"])
        if self._alive(pid):
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self._alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if self._alive(pid):
                os.killpg(pid, signal.SIGKILL)
                deadline = time.monotonic() + 5
                while self._alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
        child = self._children.pop(pid, None)
        if child is not None:
            child.wait()
        self.paths.pid_file.unlink(missing_ok=True)
        return self.status()

    def restart(self, model: str | None = None, args: list[str] | None = None) -> Status:
        """Stop (if running) and start again, with other settings when given."""
        if self.service is not None:
            self.choose(model, args)
            self.service.restart()
            return self.status()
        if self.status().state not in (State.STOPPED, State.ERROR):
            self.stop()
        return self.start(model, args)

    def log_tail(self, lines: int = 50) -> list[str]:
        if self.service is not None:
            return self.service.log_tail(lines)
        return tail(self.paths.log_file, lines)
