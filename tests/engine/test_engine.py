"""The engine thread on a tiny random checkpoint: limits, stops, seeds, aborts, counters."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time

import pytest

from tensorfold.config import EngineConfig
from tensorfold.engine.async_engine import AsyncEngine
from tensorfold.engine.types import FinishReason, Request, SamplingParams


@pytest.fixture(scope="module")
def engine(tiny_model):
    client = AsyncEngine(tiny_model, EngineConfig(dtype="float32", device="cpu"))
    client.start()
    yield client
    client.stop()


def prompt_of(engine, text: str = "Tell me a story about a lighthouse.") -> list[int]:
    tok = engine.tokenizer
    return tok.encode(tok.render_chat([{"role": "user", "content": text}]))


def run(engine, request: Request):
    async def collect():
        deltas = [d async for d in engine.generate(request)]
        return deltas
    deltas = asyncio.run(collect())
    tokens = [t for d in deltas for t in d.token_ids]
    return "".join(d.text for d in deltas), tokens, deltas[-1].finish


def req(engine, rid="r", **kw) -> Request:
    kw.setdefault("sampling", SamplingParams(temperature=0.0))
    kw.setdefault("max_tokens", 24)
    return Request(id=rid, prompt=kw.pop("prompt", None) or prompt_of(engine), **kw)


def test_reply_limit_counts_every_token(engine):
    text, tokens, fin = run(engine, req(engine, max_tokens=17, ignore_eos=True))
    assert fin.reason == FinishReason.LENGTH
    assert len(tokens) == fin.usage.completion_tokens == 17
    assert fin.usage.prompt_tokens == len(prompt_of(engine))
    assert text == engine.tokenizer.decode(tokens, skip_special_tokens=False)


def test_same_seed_same_reply_and_other_seed_differs(engine):
    sp = SamplingParams(temperature=1.0, top_p=0.95, seed=42)
    a = run(engine, req(engine, sampling=sp, ignore_eos=True, max_tokens=32))
    b = run(engine, req(engine, sampling=sp, ignore_eos=True, max_tokens=32))
    c = run(engine, req(engine, sampling=SamplingParams(temperature=1.0, top_p=0.95, seed=43),
                        ignore_eos=True, max_tokens=32))
    assert a[1] == b[1] and a[2].stats.token_sha == b[2].stats.token_sha
    assert a[1] != c[1]


def test_greedy_reply_is_reproducible(engine):
    assert run(engine, req(engine))[1] == run(engine, req(engine))[1]


def test_stop_string_ends_the_reply_and_is_left_out(engine):
    _, tokens, _ = run(engine, req(engine, max_tokens=40, ignore_eos=True))
    full = engine.tokenizer.decode(tokens, skip_special_tokens=False)
    stop = full[10:14]
    assert stop.strip()
    text, stopped_tokens, fin = run(engine, req(engine, max_tokens=40, ignore_eos=True, stop=(stop,)))
    assert fin.reason == FinishReason.STOP and fin.stop_string == stop
    assert text == full[: full.index(stop)]
    assert stop not in text
    # usage counts the tokens through the one that completed the match
    assert stopped_tokens == tokens[: len(stopped_tokens)]
    assert stop in engine.tokenizer.decode(stopped_tokens, skip_special_tokens=False)
    assert stop not in engine.tokenizer.decode(stopped_tokens[:-1], skip_special_tokens=False)


def test_end_token_stops_unless_ignored(engine):
    eos = min(engine.tokenizer.eos_token_ids)
    # a prompt of end tokens makes this random model likely to emit one; force it with top_k 1 if not
    sp = SamplingParams(temperature=0.0)
    _, tokens, fin = run(engine, req(engine, sampling=sp, max_tokens=64))
    if eos in tokens:
        assert tokens[-1] == eos and fin.reason == FinishReason.STOP
        assert fin.usage.completion_tokens == len(tokens)
        _, all_tokens, fin2 = run(engine, req(engine, sampling=sp, max_tokens=64, ignore_eos=True))
        assert len(all_tokens) == 64 and fin2.reason == FinishReason.LENGTH
    else:
        assert fin.reason == FinishReason.LENGTH


def test_abort_stops_the_request_and_counters_settle(engine):
    before = engine.health()

    async def leave_early():
        agen = engine.generate(req(engine, max_tokens=1500, ignore_eos=True, rid="gone"))
        async for d in agen:
            if len(d.token_ids):
                break
        await agen.aclose()

    asyncio.run(leave_early())
    deadline = time.time() + 10
    while engine.health()["requests_running"] and time.time() < deadline:
        time.sleep(0.01)
    after = engine.health()
    assert after["requests_running"] == 0 and not after["busy"]
    assert after["requests_total"] == before["requests_total"] + 1
    assert after["completion_tokens_total"] - before["completion_tokens_total"] < 1500


def test_requests_queue_one_at_a_time_and_all_finish(engine):
    async def many():
        async def one(i):
            return [d async for d in engine.generate(req(engine, rid=f"q{i}", max_tokens=8, ignore_eos=True))]
        return await asyncio.gather(*(one(i) for i in range(4)))
    results = asyncio.run(many())
    assert all(r[-1].finish.usage.completion_tokens == 8 for r in results)
    # identical requests give identical replies whatever their place in the queue
    assert len({r[-1].finish.stats.token_sha for r in results}) == 1


def test_idle_engine_gives_back_the_kv_of_finished_replies(tiny_model):
    """When nothing runs, the blocks a finished reply wrote and no cache keeps (its
    partial tail) go back to the system; cached prefix blocks stay."""
    client = AsyncEngine(tiny_model, EngineConfig(dtype="float32", device="cpu"))
    trimmed: list[int] = []
    runner_trim = client.runner.trim_kv
    client.runner.trim_kv = lambda blocks: (trimmed.extend(blocks), runner_trim(blocks))
    client.start()
    try:
        _, tokens, _ = run(client, req(client, max_tokens=20, ignore_eos=True))
        deadline = time.monotonic() + 5
        while not trimmed and time.monotonic() < deadline:
            time.sleep(0.01)
        cache = client.core.cache
        assert trimmed, "the idle engine returned no blocks"
        assert not set(trimmed) & set(cache._idle), "a cached prefix block was trimmed"
        assert set(trimmed) <= set(cache._free)
    finally:
        client.stop()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads RSS from /proc")
def test_idle_engine_forgets_its_prefix_cache_after_cache_idle_seconds(default_model):
    """After `cache_idle` seconds without requests (other wakes of the engine thread do not
    count) the cached prefix goes as well: its KV pages go back to the system, and the same
    request then runs cold to the same reply."""
    from tensorfold.bench.decode import bench_prompt, rss_mib

    client = AsyncEngine(default_model, EngineConfig(threads=1, cache_idle=0.5))
    client.start()
    try:
        prompt = bench_prompt(client.tokenizer, 1024)
        request = Request(id="warm", prompt=prompt, max_tokens=8, ignore_eos=True,
                          sampling=SamplingParams(temperature=0.0))
        _, first, fin = run(client, request)
        resident = rss_mib()
        cache = client.core.cache
        deadline = time.monotonic() + 30
        while cache.idle_blocks and time.monotonic() < deadline:
            client.core.call(lambda: None)                # wakes that are not requests
            time.sleep(0.05)
        assert cache.idle_blocks == 0, "the idle engine kept its prefix cache"
        time.sleep(0.2)                                   # the trim follows the forgetting
        kv = len(prompt) * client.runner.kv_bytes_per_token()
        assert (resident - rss_mib()) * 2**20 > kv / 2, "the forgotten blocks' memory stayed"
        _, again, fin2 = run(client, dataclasses.replace(request, id="cold"))
        assert fin.usage.cached_tokens == fin2.usage.cached_tokens == 0
        assert again == first
    finally:
        client.stop()
