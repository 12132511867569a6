"""The real default model (SmolLM2-135M-Instruct) behind a real server."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from tensorfold.config import EngineConfig, ServerConfig
from tensorfold.engine.async_engine import AsyncEngine
from tests.servers import running


@dataclass
class DefaultServer:
    client: openai.OpenAI
    model: str


@pytest.fixture(scope="session")
def default_server(default_model) -> Iterator[DefaultServer]:
    engine = AsyncEngine(default_model, EngineConfig(device="cpu", kv_memory=1.0))
    # no --tool-parser: SmolLM2's ChatML template gets the built-in Hermes tool prompt
    with running(engine, ServerConfig()) as served:
        with openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0, timeout=120) as c:
            yield DefaultServer(c, served.served_id)
