"""Structured outputs over HTTP: every grammar kind, drafted == serial, streamed == whole."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tensorfold.config import Limits
from tests.servers import running

from .api_helpers import assert_envelope
from .conftest import MAX_BODY, api_config, make_engine

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["ok", "n"], "additionalProperties": False}
MESSAGES = [{"role": "user", "content": "Answer in the format I asked for."}]


def chat(http, **body):
    r = http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 120, **body})
    assert r.status_code == 200, r.text
    return r.json()


def content(reply) -> str:
    return reply["choices"][0]["message"]["content"]


@pytest.mark.parametrize("temperature", [0, 0.9])
def test_json_schema_reply_matches_the_schema(http, temperature):
    reply = chat(http, temperature=temperature, seed=3,
                 response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}})
    assert reply["choices"][0]["finish_reason"] == "stop"
    value = json.loads(content(reply))
    assert set(value) == {"ok", "n"} and isinstance(value["ok"], bool) and 0 <= value["n"] <= 9


def test_each_field_form_constrains_the_reply(http):
    assert content(chat(http, guided_choice=["red", "green", "blue"])) in ("red", "green", "blue")
    assert re.fullmatch(r"[0-9]{3}-[a-z]{2}", content(chat(http, guided_regex=r"[0-9]{3}-[a-z]{2}")))
    assert content(chat(http, structured_outputs={"choice": ["yes", "no"]})) in ("yes", "no")
    value = json.loads(content(chat(http, guided_json=SCHEMA, temperature=0.7, seed=1)))
    assert 0 <= value["n"] <= 9
    assert content(chat(http, guided_grammar='root ::= "a" [b-c]+ "d"', max_tokens=30)).startswith("a")
    obj = chat(http, response_format={"type": "json_object"}, temperature=0.5, seed=2, max_tokens=60)
    if obj["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(content(obj)), dict)


def test_structured_reply_equals_its_serial_and_streamed_runs(http):
    body = {"guided_json": SCHEMA, "temperature": 1.0, "top_p": 0.95, "seed": 11}
    drafted = chat(http, **body)
    serial = chat(http, draft=False, **body)
    assert drafted["tensorfold"]["token_sha"] == serial["tensorfold"]["token_sha"]
    with http.stream("POST", "/v1/chat/completions",
                     json={"messages": MESSAGES, "max_tokens": 120, "stream": True, **body}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    assert text == content(drafted)
    assert events[-1]["tensorfold"]["token_sha"] == drafted["tensorfold"]["token_sha"]


def test_cut_reply_is_incomplete_with_length(http):
    reply = chat(http, guided_regex="[a-z]{50}", max_tokens=3)
    assert reply["choices"][0]["finish_reason"] == "length"


def test_compile_error_carries_xgrammars_reason(http):
    r = http.post("/v1/chat/completions", json={"messages": MESSAGES, "guided_regex": "a(b"})
    error = assert_envelope(r, 400, "guided_regex")
    assert "does not compile" in error["message"] and len(error["message"]) > 40


def test_completions_take_grammars_too(http):
    r = http.post("/v1/completions", json={"prompt": "Pick:", "guided_choice": ["alpha", "beta"], "max_tokens": 10})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] in ("alpha", "beta")


def grammar_compiler(server):
    if not hasattr(server.engine, "grammar_compiler"):
        pytest.skip("needs the real engine's grammar compiler")
    return server.engine.grammar_compiler()


def test_a_grammar_past_the_time_budget_is_a_400_naming_the_field(request, server):
    grammar_compiler(server)
    slow = "(" + "|".join(f"{i}x" for i in range(30_000)) + ")"     # ~200 KB, about 0.8 s to compile
    limits = Limits(body_bytes=MAX_BODY, grammar_seconds=0.2, grammar_bytes=len(slow))
    with running(make_engine(request), api_config(limits=limits)) as served:
        r = httpx.post(served.url + "/v1/chat/completions", timeout=60,
                       json={"messages": MESSAGES, "guided_regex": slow})
        ok = httpx.post(served.url + "/v1/chat/completions", timeout=60,
                        json={"messages": MESSAGES, "guided_regex": "[0-9]{3}", "max_tokens": 5})
    error = assert_envelope(r, 400, "guided_regex")
    assert "took longer than 0.2 s to compile" in error["message"]
    assert ok.status_code == 200 and re.fullmatch("[0-9]{3}", ok.json()["choices"][0]["message"]["content"])


def test_a_grammar_past_the_size_limit_is_a_400_naming_field_and_flag(http):
    big = "(" + "|".join(f"{i}x" for i in range(30_000)) + ")"
    error = assert_envelope(http.post("/v1/chat/completions", json={"messages": MESSAGES, "guided_regex": big}),
                            400, "guided_regex")
    assert "--limit grammar_bytes=" in error["message"]


def test_too_many_pending_grammars_is_a_429_to_retry(http, server):
    compiler = grammar_compiler(server)
    limit, compiler.max_pending = compiler.max_pending, 0
    try:
        r = http.post("/v1/chat/completions", json={"messages": MESSAGES, "guided_regex": "[0-9]{7}z"})
    finally:
        compiler.max_pending = limit
    error = assert_envelope(r, 429, "guided_regex", type="rate_limit_error")
    assert error["code"] == "grammar_busy" and "retry" in error["message"]
