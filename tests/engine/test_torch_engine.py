"""The engine loop driving the torch runner (the CUDA path's backend), run here on the CPU:
its logits are torch tensors, which the loop takes as numpy rows for the rules and the
sampler.  Replies are the same alone, concurrent and drafted, with sampling, penalties,
logit_bias and forced tokens."""

from __future__ import annotations

import asyncio
from unittest.mock import patch

import pytest

from tensorfold.engine.constraints import ForceToken, LogitAdjust
from tensorfold.engine.types import SamplingParams
from tests.engine.conftest import chat_prompt, collect, engine_on, make_request


@pytest.fixture(scope="module")
def torch_engine(tiny_model):
    from tensorfold.backends.torch.runner import TorchRunner

    made = []

    def torch_runner(folder, config):
        made.append(TorchRunner(folder, dtype="float32", device="cpu"))
        return made[-1]
    with patch("tensorfold.engine.async_engine.make_runner", torch_runner):
        with engine_on(tiny_model, parallel=4) as engine:
            assert made and engine.runner is made[0]
            yield engine


def test_torch_runner_replies_are_the_same_alone_concurrent_and_drafted(torch_engine):
    prompt = chat_prompt(torch_engine, "Tell me about lighthouses and the sea.")
    adjust = LogitAdjust(bias=((100, 4.0), (7, -3.0)), frequency=0.4, presence=0.2, repetition=1.2)
    kinds = [dict(sampling=SamplingParams(temperature=0.0)),
             dict(sampling=SamplingParams(temperature=0.9, top_p=0.9, top_k=50, min_p=0.02, seed=5)),
             dict(sampling=SamplingParams(temperature=1.1, seed=9), constraints=(adjust,)),
             dict(sampling=SamplingParams(temperature=0.7, seed=3), constraints=(ForceToken(3, 42), adjust))]
    requests = [make_request(prompt, f"r{i}", max_tokens=20, ignore_eos=True, **kw) for i, kw in enumerate(kinds)]

    async def together(reqs):
        return await asyncio.gather(*(collect(torch_engine, r) for r in reqs))
    alone = [asyncio.run(collect(torch_engine, r)) for r in requests]
    serial = [asyncio.run(collect(torch_engine, make_request(prompt, f"s{i}", max_tokens=20, ignore_eos=True,
                                                             draft=False, **kw)))
              for i, kw in enumerate(kinds)]
    both = asyncio.run(together(requests))
    for a, s, b in zip(alone, serial, both):
        assert len(a.tokens) == 20 and a.tokens == s.tokens == b.tokens
    assert alone[3].tokens[3] == 42
    assert alone[0].tokens != alone[1].tokens
