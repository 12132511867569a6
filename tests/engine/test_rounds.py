"""Shared rounds, the prefix cache, priority and capacity: every reply equals its solo run."""

from __future__ import annotations

import asyncio
import time

import pytest

from tensorfold.engine.types import FinishReason, Priority, SamplingParams

from .conftest import chat_prompt, collect, engine_on, make_request, run

SAMPLINGS = [
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=0.8, seed=1),
    SamplingParams(temperature=1.0, top_p=0.9, seed=2),
    SamplingParams(temperature=0.7, top_k=20, seed=3),
    SamplingParams(temperature=1.2, min_p=0.05, seed=4),
    SamplingParams(temperature=0.9, top_p=0.8, top_k=50, min_p=0.02, seed=5),
]
TEXTS = ["Hi", "Tell me about lighthouses and the people who keep them.",
         "Summarise: " + "the quick brown fox jumps over the lazy dog. " * 30,
         "Write a poem about the sea.", "List ten colours.", "Why is the sky blue? " * 5,
         "Explain recursion to a child.", "What is 2+2?"]


@pytest.fixture(scope="module")
def engine(tiny_model):
    with engine_on(tiny_model, parallel=8, prefill_chunk=64) as e:
        yield e


def cases(engine):
    return [make_request(chat_prompt(engine, t), rid=f"c{i}", max_tokens=40, ignore_eos=True,
                         sampling=SAMPLINGS[i % len(SAMPLINGS)]) for i, t in enumerate(TEXTS)]


def test_concurrent_staggered_equals_solo(engine):
    reqs = cases(engine)
    solo = [run(engine, r).tokens for r in reqs]

    async def together():
        return await asyncio.gather(*(collect(engine, r, delay=0.03 * i) for i, r in enumerate(reqs)))

    for reply, expected in zip(asyncio.run(together()), solo):
        assert reply.tokens == expected
        assert reply.finish.usage.completion_tokens == len(expected)
    assert engine.health()["streams_maximum"] == 8


def test_prefix_cache_reuse_is_exact_and_counted(engine):
    engine.core.call(engine.core.cache.clear_idle)
    prompt = chat_prompt(engine, "Count the stars: " + "one two three four five " * 20)
    req = make_request(prompt, max_tokens=30, ignore_eos=True, sampling=SAMPLINGS[2])
    fresh = run(engine, req)
    before = engine.health()["cached_tokens_total"]
    again = run(engine, req)
    block = engine.kv_plan.block_size
    assert fresh.finish.usage.cached_tokens == 0
    assert again.finish.usage.cached_tokens == (len(prompt) - 1) // block * block > 0
    assert engine.health()["cached_tokens_total"] - before == again.finish.usage.cached_tokens
    assert again.tokens == fresh.tokens


def test_next_turn_reuses_the_conversation(engine):
    tok = engine.tokenizer
    turn1 = [{"role": "user", "content": "Tell me a long story about a cat. " * 6}]
    p1 = tok.encode(tok.render_chat(turn1))
    r1 = run(engine, make_request(p1, max_tokens=48, ignore_eos=True))
    turn2 = turn1 + [{"role": "assistant", "content": r1.text}, {"role": "user", "content": "And then?"}]
    p2 = tok.encode(tok.render_chat(turn2))
    r2 = run(engine, make_request(p2, max_tokens=16, ignore_eos=True))
    common = next((i for i, (a, b) in enumerate(zip(p1 + r1.tokens, p2)) if a != b), len(p2))
    block = engine.kv_plan.block_size
    assert r2.finish.usage.cached_tokens >= (common // block - 1) * block
    engine.core.call(engine.core.cache.clear_idle)
    assert run(engine, make_request(p2, max_tokens=16, ignore_eos=True)).tokens == r2.tokens


@pytest.mark.parametrize("chunk", [1, 7, 32, 500])
def test_prefill_chunk_size_does_not_change_replies(tiny_model, engine, chunk):
    reqs = cases(engine)[:4]
    expected = [run(engine, r).tokens for r in reqs]
    with engine_on(tiny_model, parallel=4, prefill_chunk=chunk, decode_share=0.0) as other:
        assert [run(other, r).tokens for r in reqs] == expected


def test_background_yields_its_lane_and_replays_exactly(tiny_model, engine):
    long_bg = make_request(chat_prompt(engine, "Write a very long essay."), rid="bg", max_tokens=300,
                           ignore_eos=True, sampling=SAMPLINGS[1], priority=Priority.BACKGROUND)
    fg = make_request(chat_prompt(engine, "Quick question?"), rid="fg", max_tokens=8, ignore_eos=True)
    solo_bg, solo_fg = run(engine, long_bg).tokens, run(engine, fg).tokens
    with engine_on(tiny_model, parallel=1) as one_lane:
        async def scenario():
            bg_task = asyncio.ensure_future(collect(one_lane, long_bg))
            while one_lane.health()["completion_tokens_total"] < 20:
                await asyncio.sleep(0.005)
            fg_reply = await collect(one_lane, fg)
            fg_done = time.perf_counter()
            bg_reply = await bg_task
            return fg_reply, fg_done, bg_reply, time.perf_counter()

        fg_reply, fg_done, bg_reply, bg_done = asyncio.run(scenario())
        assert one_lane.health()["preemptions_total"] == 1
    assert fg_done < bg_done
    assert fg_reply.tokens == solo_fg
    assert bg_reply.tokens == solo_bg                      # replayed, checked, not sent twice
    assert bg_reply.finish.usage.completion_tokens == 300


async def until_decoding(engine) -> None:
    """Until the engine has decoded a token: its lane is busy."""
    while engine.health()["completion_tokens_total"] < 1:
        await asyncio.sleep(0.001)


def test_foreground_waits_before_background_in_the_queue(tiny_model, engine):
    with engine_on(tiny_model, parallel=1) as one_lane:
        first = make_request(chat_prompt(engine, "first"), rid="a", max_tokens=400, ignore_eos=True)
        bg = make_request(chat_prompt(engine, "bg"), rid="b", max_tokens=5, ignore_eos=True,
                          priority=Priority.BACKGROUND)
        fg = make_request(chat_prompt(engine, "fg"), rid="c", max_tokens=5, ignore_eos=True)
        order = []

        async def go(req, delay):
            await collect(one_lane, req, delay)
            order.append(req.id)

        async def scenario():
            running = asyncio.ensure_future(go(first, 0))
            await until_decoding(one_lane)
            await asyncio.gather(go(bg, 0), go(fg, 0.001), running)

        asyncio.run(scenario())
    assert order == ["a", "c", "b"]


def test_queued_request_whose_client_left_never_starts(tiny_model, engine):
    with engine_on(tiny_model, parallel=1) as one_lane:
        long = make_request(chat_prompt(engine, "long"), rid="long", max_tokens=1500, ignore_eos=True)
        queued = make_request(chat_prompt(engine, "never"), rid="q", max_tokens=5, ignore_eos=True)

        async def scenario():
            task = asyncio.ensure_future(collect(one_lane, long))
            await until_decoding(one_lane)
            agen = one_lane.generate(queued)
            waiter = asyncio.ensure_future(agen.__anext__())
            await asyncio.sleep(0.01)
            waiter.cancel()                 # the client leaves: the generator's cleanup aborts it
            with pytest.raises(asyncio.CancelledError):
                await waiter
            return await task

        asyncio.run(scenario())
        h = one_lane.health()
        assert h["requests_total"] == 2
        assert h["prompt_tokens_total"] == len(long.prompt)      # the queued prompt never ran
        assert h["requests_running"] == 0 and h["requests_waiting"] == 0


def test_a_request_that_fits_later_waits_for_memory(tiny_model, engine):
    # a pool of 8 blocks of 32 positions: each request below needs 5 blocks
    per_position = engine.runner.kv_bytes_per_token()
    with engine_on(tiny_model, parallel=4, kv_memory=8 * 32 * per_position / 2**30) as small:
        assert small.kv_plan.num_blocks == 8
        reqs = [make_request(chat_prompt(engine, f"question {i}"), rid=f"m{i}", max_tokens=150,
                             ignore_eos=True) for i in range(3)]
        expected = [run(engine, r).tokens for r in reqs]

        async def together():
            return await asyncio.gather(*(collect(small, r) for r in reqs))

        replies = asyncio.run(together())
    assert [r.tokens for r in replies] == expected
    assert all(r.finish.reason == FinishReason.LENGTH for r in replies)


def test_decode_share_zero_still_exact(tiny_model, engine):
    reqs = cases(engine)[:5]
    expected = [run(engine, r).tokens for r in reqs]
    with engine_on(tiny_model, parallel=8, prefill_chunk=16, decode_share=0.0) as e:
        async def together():
            return await asyncio.gather(*(collect(e, r, delay=0.01 * i) for i, r in enumerate(reqs)))
        assert [r.tokens for r in asyncio.run(together())] == expected
