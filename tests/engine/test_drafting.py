"""Drafted replies equal their "draft": false replies, token for token, at any temperature."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from tensorfold.engine.constraints import ForceToken, LogitAdjust
from tensorfold.engine.types import SamplingParams

from .conftest import chat_prompt, collect, engine_on, make_request, run

SAMPLINGS = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.8, seed=7),
             SamplingParams(temperature=1.0, top_p=0.9, top_k=30, min_p=0.02, seed=8)]
# Repetitive prompts make the tiny model's replies (and so the drafts) repeat too.
TEXTS = ["Repeat after me: " + "alpha beta gamma delta " * 12,
         "Copy this list: " + ", ".join(str(i % 7) for i in range(60)),
         "Say it again: " + "the cat sat on the mat. " * 10,
         "Echo: " + "one two one two three " * 10]


@pytest.fixture(scope="module", params=["tiny_model", "echo_model"])
def engine(request):
    with engine_on(request.getfixturevalue(request.param), parallel=8) as e:
        e.echoes = request.param == "echo_model"
        yield e


def requests(engine, draft: bool, n: int = 8, max_tokens: int = 64):
    return [make_request(chat_prompt(engine, TEXTS[i % len(TEXTS)]), rid=f"d{i}-{draft}", max_tokens=max_tokens,
                         ignore_eos=True, sampling=SAMPLINGS[i % len(SAMPLINGS)], draft=draft)
            for i in range(n)]


def test_drafted_equals_serial_alone_and_drafts_are_kept(engine):
    before = engine.health()
    drafted = [run(engine, r) for r in requests(engine, True)]
    after = engine.health()
    serial = [run(engine, r) for r in requests(engine, False)]
    for a, b in zip(drafted, serial):
        assert a.tokens == b.tokens
        assert b.finish.stats.drafted == 0
        assert a.finish.stats.accepted <= a.finish.stats.drafted
    assert engine.health()["drafted_total"] == after["drafted_total"] > before["drafted_total"]
    if engine.echoes:      # its replies repeat, so drafts are kept and rounds settle several tokens
        assert after["accepted_total"] > before["accepted_total"]
        assert sum(a.finish.stats.accepted for a in drafted) == after["accepted_total"] - before["accepted_total"]
        assert after["rounds_total"] - before["rounds_total"] < \
            0.75 * (after["completion_tokens_total"] - before["completion_tokens_total"])


def test_drafted_concurrent_equals_serial_solo(engine):
    serial = [run(engine, r).tokens for r in requests(engine, False)]

    async def together():
        return await asyncio.gather(*(collect(engine, r, delay=0.02 * i)
                                      for i, r in enumerate(requests(engine, True))))

    assert [r.tokens for r in asyncio.run(together())] == serial


@pytest.mark.parametrize("position", [0, 5, 17])
def test_forced_token_is_applied_by_the_row_path(engine, position):
    forced = 1234
    for sampling in SAMPLINGS:
        base = dict(max_tokens=40, ignore_eos=True, sampling=sampling,
                    constraints=(ForceToken(position, forced),))
        prompt = chat_prompt(engine, TEXTS[0])
        drafted = run(engine, make_request(prompt, rid="f1", draft=True, **base))
        serial = run(engine, make_request(prompt, rid="f2", draft=False, **base))
        assert drafted.tokens == serial.tokens
        assert drafted.tokens[position] == forced
        free = run(engine, make_request(prompt, rid="f3", max_tokens=40, ignore_eos=True, sampling=sampling))
        assert free.tokens[:position] == drafted.tokens[:position]


def test_replies_end_at_the_limit_with_drafts(engine):
    for n in (1, 2, 3, 13):
        r = run(engine, make_request(chat_prompt(engine, TEXTS[1]), max_tokens=n, ignore_eos=True))
        assert len(r.tokens) == r.finish.usage.completion_tokens == n


def test_draft_model_drafts_are_exact(tiny_model, echo_model):
    # the target as its own draft model: drafts drawn with the request's keyed rule are the
    # target's own draws, so every one is kept, greedy or sampled
    with engine_on(tiny_model, parallel=4, draft_model=str(tiny_model)) as same:
        prompt = chat_prompt(same, TEXTS[2])
        for sampling in SAMPLINGS:
            drafted = run(same, make_request(prompt, max_tokens=48, ignore_eos=True, sampling=sampling))
            serial = run(same, make_request(prompt, max_tokens=48, ignore_eos=True, draft=False,
                                            sampling=sampling))
            assert drafted.tokens == serial.tokens
            assert drafted.finish.stats.drafted > 0
            assert drafted.finish.stats.accepted == drafted.finish.stats.drafted
    # another model drafts: sampled replies, alone and concurrent, equal the serial ones
    with engine_on(tiny_model, parallel=8, draft_model=str(echo_model)) as other:
        serial = [run(other, r).tokens for r in requests(other, False)]

        async def together():
            return await asyncio.gather(*(collect(other, r, delay=0.02 * i)
                                          for i, r in enumerate(requests(other, True))))

        replies = asyncio.run(together())
        assert [r.tokens for r in replies] == serial
        assert sum(r.finish.stats.drafted for r in replies) > 0


def test_draft_model_with_another_tokenizer_is_refused(tiny_model, tmp_path):
    import json
    import shutil

    from tensorfold.checkpoints.errors import CheckpointError

    other = tmp_path / "other-tokenizer"
    shutil.copytree(tiny_model, other)
    data = json.loads((other / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    token = next(t for t in vocab if t.isalpha() and len(t) > 3)
    vocab[token + "x"] = vocab.pop(token)
    (other / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="tokenizer"):
        with engine_on(tiny_model, draft_model=str(other)):
            pass


def test_thinking_budget_closes_an_open_block_at_its_budget(engine):
    from tensorfold.engine.constraints import ThinkingBudget

    tok = engine.tokenizer
    close, marker = tuple(tok.encode("\n</think>\n\n")), tuple(tok.encode("</think>"))
    rule = ThinkingBudget(6, close, marker, tuple(tok.encode("<think>")), inside=True)
    prompt = chat_prompt(engine, TEXTS[1])
    for sampling in SAMPLINGS:
        drafted = run(engine, make_request(prompt, max_tokens=30, ignore_eos=True, sampling=sampling,
                                           constraints=(rule,)))
        serial = run(engine, make_request(prompt, max_tokens=30, ignore_eos=True, sampling=sampling,
                                          constraints=(rule,), draft=False))
        assert drafted.tokens == serial.tokens
        assert tuple(drafted.tokens[5:5 + len(close)]) == close
    # a block the model closed earlier is left alone
    early = tuple(ForceToken(i, t) for i, t in enumerate(marker))
    closed = run(engine, make_request(prompt, max_tokens=30, ignore_eos=True, constraints=(*early, rule)))
    free = run(engine, make_request(prompt, max_tokens=30, ignore_eos=True, constraints=early))
    assert closed.tokens == free.tokens
    # not thinking (the block was never opened): no cut
    idle = ThinkingBudget(6, close, marker, tuple(tok.encode("<think>")), inside=False)
    plain = run(engine, make_request(prompt, max_tokens=30, ignore_eos=True))
    assert run(engine, make_request(prompt, max_tokens=30, ignore_eos=True, constraints=(idle,))).tokens == plain.tokens


def test_penalties_and_bias_drafted_equal_serial(engine):
    """Penalties read the reply before each row, so drafted, concurrent and serial runs
    apply the same adjustment to the same row and agree token for token."""
    def reqs(draft: bool):
        out = []
        for i in range(6):
            prompt = chat_prompt(engine, TEXTS[i % len(TEXTS)])
            rule = LogitAdjust(bias=((13, 1.5), (29, -3.0)), frequency=0.3 * (i % 3), presence=0.2 * (i % 2),
                               repetition=1.0 + 0.1 * (i % 4), prompt_seen=torch.unique(torch.tensor(prompt)))
            out.append(make_request(prompt, rid=f"p{i}-{draft}", max_tokens=48, ignore_eos=True,
                                    sampling=SAMPLINGS[i % len(SAMPLINGS)], draft=draft, constraints=(rule,)))
        return out

    serial = [run(engine, r).tokens for r in reqs(False)]
    assert [run(engine, r).tokens for r in reqs(True)] == serial

    async def together():
        return await asyncio.gather(*(collect(engine, r, delay=0.02 * i) for i, r in enumerate(reqs(True))))

    assert [r.tokens for r in asyncio.run(together())] == serial
    plain = [run(engine, make_request(r.prompt, rid=f"q{i}", max_tokens=48, ignore_eos=True, sampling=r.sampling,
                                      draft=False)).tokens for i, r in enumerate(reqs(False))]
    assert plain != serial                      # the rule changed the replies


def test_idle_engine_gives_back_the_draft_models_kv(tiny_model):
    """Once nothing runs, the blocks the draft model wrote for finished replies go back to
    the system, as the target's do."""
    with engine_on(tiny_model, draft_model=str(tiny_model)) as e:
        drafter = e.core.drafter
        trimmed: list[int] = []
        trim = drafter.backend.trim_kv
        drafter.backend.trim_kv = lambda blocks: (trimmed.extend(blocks), trim(blocks))
        reply = run(e, make_request(chat_prompt(e, TEXTS[2]), max_tokens=48, ignore_eos=True))
        assert reply.finish.stats.drafted > 0
        deadline = time.monotonic() + 5
        while not trimmed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert trimmed, "the idle engine kept the draft model's blocks"
        assert set(trimmed) <= set(drafter.cache._free)
