"""Fixtures for the HTTP-edge tests: real Hypercorn servers on free loopback ports.

`server` is the contract server: its tests hold for any engine, and run once
per engine (the CPU engine and, where mlx imports, MLX, each on the tiny Llama
and on the tiny Qwen3.5 hybrid). Its engine comes
from `make_engine()` (the real AsyncEngine on the tiny random checkpoint, or
the FakeEngine test double). `fake_server` always runs the
FakeEngine: its tests inspect what reached the engine and inject failures.

TENSORFOLD_TEST_API_ENGINE=fake runs the contract tests on the FakeEngine too
(for when the real engine cannot load); the real engine is imported only when
a contract test needs it, so the FakeEngine tests run whatever state it is in.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.api.fake_engine import FakeEngine
from tests.servers import Served, running
from tensorfold.config import EngineConfig, Limits, ServerConfig

ALIAS = "tf-test-alias"
MAX_BODY = 256 * 1024
API_KEY = "test-key-123"


def _engines() -> list[str]:
    from tensorfold.backends.mlx.runner import mlx_missing

    return ["torch", "hybrid"] if mlx_missing() else ["torch", "hybrid", "mlx", "mlx-hybrid"]


def make_engine(request: pytest.FixtureRequest, engine: str = "torch") -> Any:
    """The engine behind the contract server (`server`): the real AsyncEngine
    on the tiny random checkpoint. `return FakeEngine()` runs the contract
    tests on the test double instead (so does TENSORFOLD_TEST_API_ENGINE=fake)."""
    if os.environ.get("TENSORFOLD_TEST_API_ENGINE") == "fake":
        return FakeEngine()
    from tensorfold.engine.async_engine import AsyncEngine

    mlx = engine.startswith("mlx")
    config = EngineConfig(engine="mlx") if mlx else EngineConfig(dtype="float32", device="cpu")
    model = request.getfixturevalue("hybrid_model" if engine.endswith("hybrid") else "tiny_model")
    return AsyncEngine(model, config)


def api_config(limits: Limits | None = None, **overrides: Any) -> ServerConfig:
    return ServerConfig(aliases=(ALIAS,), limits=limits or Limits(body_bytes=MAX_BODY), **overrides)


@pytest.fixture(scope="session", params=_engines())
def server(request: pytest.FixtureRequest) -> Iterator[Served]:
    with running(make_engine(request, request.param), api_config()) as served:
        yield served


@pytest.fixture(scope="session")
def fake_server() -> Iterator[Served]:
    with running(FakeEngine(), api_config()) as served:
        yield served


@pytest.fixture(scope="session")
def auth_server() -> Iterator[Served]:
    with running(FakeEngine(), api_config(api_key=API_KEY)) as served:
        yield served


@pytest.fixture(scope="session")
def http(server: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def fake_http(fake_server: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fake_server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def client(server: Served) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def fake_client(fake_server: Served) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake_server.base_url, api_key="unused", max_retries=0, timeout=30) as c:
        yield c
