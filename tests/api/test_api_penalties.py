"""frequency_penalty, presence_penalty, repetition_penalty and logit_bias through the
official openai client: honoured, part of the keyed rule, refused when out of range."""

from __future__ import annotations

import openai
import pytest

HELLO = [{"role": "user", "content": "Count with me: one two one two one two."}]


def ask(client, **kw):
    model = client.models.list().data[0].id
    return client.chat.completions.create(model=model, messages=HELLO, **{"max_tokens": 12, **kw})


def test_logit_bias_of_100_makes_greedy_replies_that_token(client, server):
    tok = server.engine.tokenizer
    token = tok.encode(" banana")[0]
    reply = ask(client, temperature=0, logit_bias={str(token): 100})
    assert reply.usage.completion_tokens == 12
    assert reply.choices[0].message.content == tok.decode([token] * 12)


def test_penalties_change_the_reply_and_stay_exact_under_drafting(client):
    plain = ask(client, temperature=0.8, seed=4, max_tokens=40)
    for kw in ({"frequency_penalty": 1.5}, {"presence_penalty": 2.0}, {"extra_body": {"repetition_penalty": 1.8}}):
        drafted = ask(client, temperature=0.8, seed=4, max_tokens=40, **kw)
        extra = {**kw.pop("extra_body", {}), "draft": False}
        serial = ask(client, temperature=0.8, seed=4, max_tokens=40, extra_body=extra, **kw)
        sha = lambda r: r.model_extra["tensorfold"]["token_sha"]  # noqa: E731
        assert sha(drafted) == sha(serial)
        assert sha(drafted) != sha(plain), kw


def test_completions_take_them_too(client, server):
    tok = server.engine.tokenizer
    token = tok.encode(" apple")[0]
    model = client.models.list().data[0].id
    args = {"model": model, "prompt": "one two one two", "max_tokens": 6, "temperature": 0}
    assert client.completions.create(logit_bias={str(token): 100}, **args).choices[0].text == tok.decode([token] * 6)
    sampled = {**args, "temperature": 0.9, "seed": 2, "max_tokens": 40}
    assert client.completions.create(presence_penalty=-2.0, **sampled).choices[0].text != \
        client.completions.create(**sampled).choices[0].text


@pytest.mark.parametrize("kw, param", [
    ({"frequency_penalty": 2.5}, "frequency_penalty"),
    ({"presence_penalty": -3}, "presence_penalty"),
    ({"extra_body": {"repetition_penalty": 0}}, "repetition_penalty"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"logit_bias": {str(10 ** 7): 1}}, "logit_bias"),
])
def test_out_of_range_is_a_400_naming_the_field(client, kw, param):
    with pytest.raises(openai.BadRequestError) as err:
        ask(client, **kw)
    assert err.value.body["param"] == param
