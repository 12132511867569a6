"""Tool calls in chat replies: parsed from the reply text, streamed and whole alike.

The tiny random model cannot decide to call a tool, so a grammar makes its
reply a Hermes-style call; the reply parser then turns that text into
tool_calls, exactly as it would for a model that wrote the call itself.
"""

from __future__ import annotations

import json

import openai
import pytest

from tensorfold.config import EngineConfig, ServerConfig
from tensorfold.engine.async_engine import AsyncEngine
from tests.servers import running

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
PROSE = "It is sunny."


@pytest.fixture(scope="module")
def hermes(tiny_model):
    engine = AsyncEngine(tiny_model, EngineConfig(dtype="float32", device="cpu", kv_memory=0.1))
    with running(engine, ServerConfig(tool_parser="hermes")) as served:
        with openai.OpenAI(base_url=served.base_url, api_key="x", max_retries=0, timeout=60) as client:
            yield client, served.served_id


def ask(hermes, reply_regex: str, stream: bool = False, **kw):
    client, model = hermes
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[TOOL],
        max_tokens=80, stream=stream, extra_body={"guided_regex": reply_regex}, **kw)


def escape(text: str) -> str:
    return "".join("\\" + c if c in "{}[]().*+?|^$\\" else c for c in text)


def test_a_call_comes_back_as_tool_calls(hermes):
    reply = ask(hermes, escape(CALL))
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_") and not choice.message.content


def test_streamed_call_equals_whole(hermes):
    chunks = list(ask(hermes, escape(CALL), stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert calls[0].function.name == "get_weather" and calls[0].id.startswith("call_")
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == {"city": "Paris"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert not "".join(d.content or "" for d in deltas)


def test_prose_and_unoffered_calls_stay_content(hermes):
    assert ask(hermes, escape(PROSE)).choices[0].message.content == PROSE
    other = CALL.replace("get_weather", "launch_rocket")
    reply = ask(hermes, escape(other))
    assert reply.choices[0].message.content == other and not reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "stop"


def test_tool_choice_none_hides_tools_and_parses_nothing(hermes):
    reply = ask(hermes, escape(CALL), tool_choice="none")
    assert reply.choices[0].message.content == CALL and reply.choices[0].finish_reason == "stop"


OTHER = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def forced(hermes, tool_choice, tools, **kw):
    client, model = hermes
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello there."}], tools=tools,
        tool_choice=tool_choice, **{"max_tokens": 40, "temperature": 0.8, "seed": 9, **kw})


def text_of(reply) -> str:
    m = reply.choices[0].message
    return m.content or "".join(c.function.name for c in m.tool_calls or [])


@pytest.mark.parametrize("choice, names", [("required", {"get_weather", "get_time"}),
                                           ({"type": "function", "function": {"name": "get_time"}}, {"get_time"})])
def test_forced_call_is_one_call_to_an_offered_tool(hermes, choice, names):
    """A forced Hermes call is held to a grammar even for tools that are not strict: the
    reply is one call that parses, to an offered tool, with a JSON object as arguments."""
    for seed in range(3):
        reply = forced(hermes, choice, [TOOL, OTHER], seed=seed, max_tokens=120)
        (call,) = reply.choices[0].message.tool_calls
        assert call.function.name in names and isinstance(json.loads(call.function.arguments), dict)
        assert reply.choices[0].finish_reason == "tool_calls"
        serial = forced(hermes, choice, [TOOL, OTHER], seed=seed, max_tokens=120, extra_body={"draft": False})
        assert serial.model_extra["tensorfold"]["token_sha"] == reply.model_extra["tensorfold"]["token_sha"]


def test_a_forced_call_cut_off_by_the_token_limit_is_a_partial_call(hermes):
    """As OpenAI answers it: the call with the arguments text so far, finish_reason length;
    never the call's markup as content. Streamed the same."""
    reply = forced(hermes, "required", [TOOL], max_tokens=14)
    choice = reply.choices[0]
    assert choice.finish_reason == "length" and not choice.message.content
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    client, model = hermes
    chunks = list(client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello there."}], tools=[TOOL], tool_choice="required",
        max_tokens=14, temperature=0.8, seed=9, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    args = "".join(tc.function.arguments or "" for d in deltas for tc in d.tool_calls or [])
    assert args == call.function.arguments and not "".join(d.content or "" for d in deltas)


def test_forcing_an_unoffered_function_is_refused(hermes):
    with pytest.raises(openai.BadRequestError):
        forced(hermes, {"type": "function", "function": {"name": "nope"}}, [TOOL])


STRICT = {"type": "function", "function": {"name": "set_alarm", "strict": True, "parameters": {
    "type": "object", "additionalProperties": False, "required": ["hour", "days"],
    "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                   "days": {"type": "array", "items": {"enum": ["mon", "tue", "sat"]}, "maxItems": 2}}}}}
STRICT_TIME = {"type": "function", "function": {"name": "get_time", "strict": True, "parameters": {
    "type": "object", "additionalProperties": False, "required": ["zone"],
    "properties": {"zone": {"enum": ["UTC", "CET"]}}}}}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "set_alarm"}}])
def test_strict_tools_hold_the_arguments_to_their_schema(hermes, choice):
    """Even a random model's forced call to strict tools parses, names an offered tool,
    matches its schema and ends the reply with finish_reason tool_calls."""
    for seed in range(4):
        reply = forced(hermes, choice, [STRICT, STRICT_TIME], seed=seed, max_tokens=120)
        (call,) = reply.choices[0].message.tool_calls
        args = json.loads(call.function.arguments)
        if call.function.name == "set_alarm":
            assert set(args) == {"hour", "days"} and 0 <= args["hour"] <= 23
            assert len(args["days"]) <= 2 and set(args["days"]) <= {"mon", "tue", "sat"}
        else:
            assert choice == "required" and args in ({"zone": "UTC"}, {"zone": "CET"})
        assert reply.choices[0].finish_reason == "tool_calls"
        serial = forced(hermes, choice, [STRICT, STRICT_TIME], seed=seed, max_tokens=120,
                        extra_body={"draft": False})
        assert serial.model_extra["tensorfold"]["token_sha"] == reply.model_extra["tensorfold"]["token_sha"]


def test_strict_call_streams_as_it_comes_whole(hermes):
    whole = forced(hermes, "required", [STRICT], seed=3, max_tokens=120)
    chunks = list(forced(hermes, "required", [STRICT], seed=3, max_tokens=120, stream=True))
    args = "".join(tc.function.arguments or "" for c in chunks if c.choices
                   for tc in c.choices[0].delta.tool_calls or [])
    assert json.loads(args) == json.loads(whole.choices[0].message.tool_calls[0].function.arguments)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"

