"""Real Hypercorn servers on free loopback ports, for the API and end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tensorfold.api.app import create_app
from tensorfold.api.server import ServerThread
from tensorfold.config import ServerConfig


@dataclass
class Served:
    url: str
    engine: Any
    config: ServerConfig

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def served_id(self) -> str:
        return self.config.served_model_name or self.engine.model_name


@contextmanager
def running(engine: Any, config: ServerConfig) -> Iterator[Served]:
    if hasattr(engine, "start"):
        engine.start()
    thread = ServerThread(create_app(engine, config))
    try:
        url = thread.start()
        yield Served(url, engine, config)
    finally:
        thread.stop()
        if hasattr(engine, "stop"):
            engine.stop()


@contextmanager
def http_server(folder: Any, config: ServerConfig | None = None) -> Iterator[Any]:
    """A real server on `folder` (tiny settings) and an httpx client for it."""
    import httpx

    from tensorfold.config import EngineConfig
    from tensorfold.engine.async_engine import AsyncEngine

    engine = AsyncEngine(folder, EngineConfig(dtype="float32", device="cpu", kv_memory=0.1))
    with running(engine, config or ServerConfig()) as served:
        with httpx.Client(base_url=served.url, timeout=60) as http:
            yield http


def serve_default(*args: str) -> tuple[Any, str]:
    """`python -m tensorfold serve` on the default model, one thread, a free port: the
    process (stdout holds the rest of its log) and its root URL once it listens."""
    import re
    import subprocess
    import sys

    server = subprocess.Popen([sys.executable, "-m", "tensorfold", "--log-level", "INFO", "serve", "--port", "0",
                               "--threads", "1", "--kv-memory", "0.5", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in server.stdout:
        if found := re.search(r"listening on (http://\S+)/v1", line):
            return server, found.group(1)
    server.kill()
    raise AssertionError(f"the server did not start: {server.stderr.read()[-3000:]}")


def wait_for(predicate: Any, timeout: float = 5.0) -> bool:
    """Whether `predicate()` came true within `timeout` seconds (polled every 20 ms)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False
