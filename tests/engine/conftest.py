"""Engines on the tiny random checkpoint, and helpers to drive them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tensorfold.config import EngineConfig
from tensorfold.engine.async_engine import AsyncEngine
from tensorfold.engine.types import Delta, Finish, Request, SamplingParams


@dataclass
class Reply:
    text: str
    tokens: list[int]
    finish: Finish
    deltas: list[Delta]


@contextmanager
def engine_on(folder, **config) -> Iterator[AsyncEngine]:
    config.setdefault("dtype", "float32")
    config.setdefault("device", "cpu")
    config.setdefault("kv_memory", 0.25)
    client = AsyncEngine(folder, EngineConfig(**config))
    client.start()
    try:
        yield client
    finally:
        client.stop()


async def collect(engine: AsyncEngine, request: Request, delay: float = 0.0) -> Reply:
    if delay:
        await asyncio.sleep(delay)
    deltas = [d async for d in engine.generate(request)]
    return Reply("".join(d.text for d in deltas), [t for d in deltas for t in d.token_ids],
                 deltas[-1].finish, deltas)


def run(engine: AsyncEngine, request: Request) -> Reply:
    return asyncio.run(collect(engine, request))


def chat_prompt(engine: AsyncEngine, text: str) -> list[int]:
    tok = engine.tokenizer
    return tok.encode(tok.render_chat([{"role": "user", "content": text}]))


def make_request(prompt: list[int], rid: str = "r", max_tokens: int = 24, **kw) -> Request:
    kw.setdefault("sampling", SamplingParams(temperature=0.0))
    return Request(id=rid, prompt=prompt, max_tokens=max_tokens, **kw)
