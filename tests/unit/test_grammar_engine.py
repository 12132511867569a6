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


def test_a_reply_that_opens_its_own_think_block_gets_the_grammar_after_it(engine):
    """The think opener is one token the reply writes first (ForceToken stands in for a model
    that chooses it); the thinking budget closes the block; the grammar holds after the close.
    Drafted, serial and concurrent replies are equal."""
    from tensorfold.engine.constraints import ForceToken, ThinkingBudget
    from tensorfold.engine.types import Think

    tok = engine.tokenizer
    opener = tok.hf.convert_tokens_to_ids("<|im_start|>")      # a one-token opener stands in for <think>
    close, marker = tuple(tok.encode("\n</think>\n\n")), tuple(tok.encode("</think>"))
    think = Think((opener,), marker)
    compiled = engine.grammars.compile(GrammarSpec.choice(["yes", "no"]))
    prompt = chat_prompt(engine, TEXT)

    def reqs(draft, first):
        rules = lambda: (ForceToken(0, first), ThinkingBudget(6, close, marker, (opener,)).stop_at_marker(),
                         GrammarConstraint(compiled, start_after=marker, may_open=opener))
        return [make_request(prompt, rid=f"t{i}-{draft}-{first}", max_tokens=24, draft=draft, sampling=s,
                             constraints=rules()) for i, s in enumerate(SAMPLINGS)]

    serial = [run(engine, r) for r in reqs(False, opener)]
    drafted = [run(engine, r) for r in reqs(True, opener)]
    for a, b in zip(serial, drafted):
        assert a.tokens == b.tokens
        assert a.tokens[0] == opener
        at = a.tokens.index(marker[-1]) + 1                 # the grammar's part follows the marker
        answer = tok.decode([t for t in a.tokens[at:] if t not in tok.eos_token_ids])
        assert answer in ("yes", "no"), answer
        assert think.reasoning_tokens(a.tokens) == at
    # without the opener first, the grammar holds from the first token
    plain = [run(engine, r) for r in reqs(False, tok.encode("yes")[0])]
    for p in plain:
        assert tok.decode([t for t in p.tokens if t not in tok.eos_token_ids]) == "yes"
