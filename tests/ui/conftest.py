"""Front-end tests: a real `tensorfold serve` process on the tiny model,
started by the client-side supervisor on a free port, for every front end to
drive (the daemon is one process per test module)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tensorfold.client import DaemonPaths, State, Supervisor

pytestmark = pytest.mark.ui


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def daemon_env() -> dict[str, str]:
    """The daemon's environment: one torch thread, the test's model cache."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def make_supervisor(folder: Path, port: int | None = None) -> Supervisor:
    return Supervisor(f"http://127.0.0.1:{port or free_port()}", paths=DaemonPaths.under(folder),
                      service=None, env=daemon_env())


SERVE_ARGS = ["--threads", "1", "--dtype", "float32", "--kv-memory", "0.1", "--parallel", "2"]


@pytest.fixture(scope="module")
def live_daemon(tmp_path_factory, tiny_model) -> Iterator[Supervisor]:
    """A real daemon on the tiny model, serving until the module ends."""
    supervisor = make_supervisor(tmp_path_factory.mktemp("daemon"))
    supervisor.start(str(tiny_model), SERVE_ARGS)
    try:
        supervisor.wait(State.SERVING, State.BUSY, State.ERROR, timeout=120)
        yield supervisor
    finally:
        supervisor.stop()
