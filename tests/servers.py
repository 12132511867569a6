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
