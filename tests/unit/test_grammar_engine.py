"""Grammar constraints in the real engine loop (tiny random checkpoints): drafted, serial and
concurrent replies are equal and follow the grammar."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

pytest.importorskip("xgrammar")

from tensorfold.engine.types import FinishReason, SamplingParams
from tensorfold.grammar import GrammarCompiler, GrammarSpec
from tensorfold.grammar.constraint import GrammarConstraint
from tests.engine.conftest import chat_prompt, collect, engine_on, make_request, run

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "n": {"type": "integer", "minimum": 0, "maximum": 999},
                         "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 4}},
          "required": ["name", "n", "tags"]}
REGEX = r"(ab|cd|[0-9]{1,3}){1,12}"
SAMPLINGS = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.9, seed=3),
             SamplingParams(temperature=1.0, top_p=0.9, top_k=40, seed=4)]
TEXT = "Copy: " + '{"name": "abc", "n": 12, "tags": ["a", "b"]} ' * 8


@pytest.fixture(scope="module", params=["echo_model", "tiny_model"])
def engine(request):
    with engine_on(request.getfixturevalue(request.param), parallel=4) as e:
        e.grammars = GrammarCompiler(e.tokenizer, e.runner.vocab_size)
        yield e
        e.grammars.close()


def requests(engine, spec, draft, max_tokens=96):
    compiled = engine.grammars.compile(spec)
    prompt = chat_prompt(engine, TEXT)
    return [make_request(prompt, rid=f"g{i}-{draft}", max_tokens=max_tokens, draft=draft, sampling=s,
                         constraints=(GrammarConstraint(compiled),))   # one constraint per request
            for i, s in enumerate(SAMPLINGS)]


@pytest.mark.parametrize("spec", [GrammarSpec.json_schema(SCHEMA), GrammarSpec.regex(REGEX)],
                         ids=["schema", "regex"])
def test_constrained_replies_are_equal_drafted_serial_and_concurrent(engine, spec):
    serial = [run(engine, r) for r in requests(engine, spec, draft=False)]
    drafted = [run(engine, r) for r in requests(engine, spec, draft=True)]

    async def together():
        return await asyncio.gather(*(collect(engine, r, delay=0.01 * i)
                                      for i, r in enumerate(requests(engine, spec, draft=True))))

    concurrent = asyncio.run(together())
    for a, b, c in zip(serial, drafted, concurrent):
        assert a.tokens == b.tokens == c.tokens
        assert a.finish.reason in (FinishReason.STOP, FinishReason.LENGTH), a.finish
        if a.finish.reason == FinishReason.STOP:
            if spec.kind == "regex":
                assert re.fullmatch(REGEX, a.text), a.text
            else:
                value = json.loads(a.text)
                assert list(value) == ["name", "n", "tags"], value
    if engine.model_name.startswith("tiny-echo"):
        assert sum(r.finish.stats.drafted for r in drafted) > 0
