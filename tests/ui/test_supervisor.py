"""The client-side supervisor against a real `tensorfold serve` process:
start, state, restart with another model, log tail, graceful stop, a daemon
that fails to start, a daemon it did not start; and the service managers'
commands (launchd, systemd), recorded by stand-in programs on PATH."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tensorfold.client import DaemonClient, State, Supervisor
from tensorfold.client.services import LaunchdAgent, SystemdUserService
from tensorfold.client.supervisor import SupervisorError

from .conftest import SERVE_ARGS, make_supervisor

pytestmark = pytest.mark.ui


def test_start_serve_restart_stop(tmp_path, tiny_model, echo_model):
    sup = make_supervisor(tmp_path)
    assert sup.status().state is State.STOPPED
    started = sup.start(str(tiny_model), SERVE_ARGS)
    assert started.state in (State.STARTING, State.SERVING)
    assert started.managed_by == "process" and started.pid
    serving = sup.wait(State.SERVING, timeout=120)
    assert serving.model == tiny_model.name
    assert DaemonClient(sup.url).models() == [tiny_model.name]
    assert any("listening on" in line for line in sup.log_tail(50))
    with pytest.raises(SupervisorError, match="already"):
        sup.start()

    # another model: the settings file keeps the other arguments
    sup.restart(model=str(echo_model))
    assert sup.wait(State.SERVING, timeout=120).model == echo_model.name
    assert sup.settings()[sup.settings().index("--model") + 1] == str(echo_model)
    assert "--kv-memory" in sup.settings()

    pid = sup.status().pid
    stopped = sup.stop()
    assert stopped.state is State.STOPPED
    assert not sup.paths.pid_file.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not DaemonClient(sup.url).alive()


def test_a_daemon_that_cannot_start_is_an_error_with_its_reason(tmp_path):
    sup = make_supervisor(tmp_path)
    sup.start(str(tmp_path / "no-such-model"), ["--threads", "1"])
    status = sup.wait(State.ERROR, timeout=60)
    assert "no-such-model" in status.message or "tensorfold:" in status.message
    assert sup.stop().state is State.STOPPED          # clears the error


def test_another_supervisor_sees_and_stops_the_same_daemon(live_daemon, tmp_path):
    other = Supervisor(live_daemon.url, paths=live_daemon.paths, service=None)
    assert other.status().state in (State.SERVING, State.BUSY)
    assert other.status().pid == live_daemon.status().pid
    stranger = make_supervisor(tmp_path, port=live_daemon.port)
    assert stranger.status().managed_by == "external"
    with pytest.raises(SupervisorError, match="not started here"):
        stranger.stop()


def _recorder(folder: Path, name: str, output: str = "", code: int = 0) -> Path:
    """A stand-in for a service manager's command that records its arguments."""
    script = folder / name
    script.write_text(f'#!/bin/sh\necho "$@" >> "{folder}/calls"\nprintf "%s" "{output}"\nexit {code}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_systemd_unit_is_driven_with_systemctl(tmp_path):
    systemctl = _recorder(tmp_path, "systemctl", output="loaded")
    journalctl = _recorder(tmp_path, "journalctl", output="line one\nline two")
    service = SystemdUserService(systemctl=str(systemctl), journalctl=str(journalctl))
    assert service.installed()
    sup = Supervisor("http://127.0.0.1:9", paths=make_supervisor(tmp_path).paths, service=service)
    sup.restart(model="/models/x")
    sup.stop()
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "--user restart tensorfold.service" in calls
    assert "--user stop tensorfold.service" in calls
    assert sup.chosen_model() == "/models/x"
    assert sup.log_tail(2) == ["line one", "line two"]
    assert (tmp_path / "calls").read_text().count("-u tensorfold.service") == 1


def test_launchd_agent_is_driven_with_launchctl(tmp_path):
    launchctl = _recorder(tmp_path, "launchctl", code=1)       # `print` fails: not loaded yet
    agents = tmp_path / "LaunchAgents"
    agents.mkdir()
    (agents / "dev.tensorfold.daemon.plist").write_text("<plist/>")
    agent = LaunchdAgent(tmp_path / "daemon.log", launchctl=str(launchctl), agents=agents)
    assert agent.installed()
    with pytest.raises(RuntimeError, match="bootstrap"):
        agent.start()
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[-1] == f"bootstrap gui/{os.getuid()} {agents / 'dev.tensorfold.daemon.plist'}"
