"""The real default model, served on a real port and asked a real question."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_capital_of_france(default_server):
    reply = default_server.client.chat.completions.create(
        model=default_server.model,
        messages=[{"role": "user", "content": "Name the capital of France."}],
        temperature=0,
        max_tokens=32,
    )
    assert "Paris" in reply.choices[0].message.content
    assert reply.usage.completion_tokens > 0


def test_capital_of_france_streamed(default_server):
    stream = default_server.client.chat.completions.create(
        model=default_server.model,
        messages=[{"role": "user", "content": "Name the capital of France."}],
        temperature=0,
        max_tokens=32,
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)     # the quickstart's loop
    assert "Paris" in text
    assert chunks[-1].choices[0].finish_reason is not None
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_json_schema_reply_parses_and_validates(default_server):
    import json

    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                               "country": {"type": "string", "maxLength": 40}},
              "required": ["city", "country"], "additionalProperties": False}
    reply = default_server.client.chat.completions.create(
        model=default_server.model, temperature=0, max_tokens=80,
        messages=[{"role": "user", "content": "Name the capital of France and its country as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "capital", "schema": schema}})
    assert reply.choices[0].finish_reason == "stop"
    value = json.loads(reply.choices[0].message.content)
    assert set(value) == {"city", "country"} and all(isinstance(v, str) for v in value.values())


def test_tool_choice_required_opens_a_call(default_server):
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    reply = default_server.client.chat.completions.create(
        model=default_server.model, temperature=0, max_tokens=40, tools=[tool], tool_choice="required",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    message = reply.choices[0].message
    if message.tool_calls:
        assert message.tool_calls[0].function.name == "get_weather"
        assert reply.choices[0].finish_reason in ("tool_calls", "length")     # length: cut after the call
    else:                                  # the model's arguments were malformed: the call stays content
        assert message.content.startswith('<tool_call>\n{"name": "get_weather"')


# Tools on the default model without --tool-parser: the built-in Hermes tool prompt (api/request/tool_prompt.py).
# The replies below are the 135M model's greedy ones; a forced call's name is held by the server, its
# arguments are the model's own.
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Get the current time",
        "parameters": {"type": "object", "properties": {}}}}
WHAT_TIME = [{"role": "user", "content": "What time is it?"}]


def the_call(reply):
    import json

    (call,) = reply.choices[0].message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    assert isinstance(json.loads(call.function.arguments), dict)
    assert reply.choices[0].finish_reason in ("tool_calls", "length")
    return call


def test_required_call_comes_back_as_tool_calls(default_server):
    reply = default_server.client.chat.completions.create(
        model=default_server.model, temperature=0, max_tokens=64, tools=[TIME], tool_choice="required",
        messages=WHAT_TIME)
    assert the_call(reply).function.name == "get_time"


def test_named_call_comes_back_as_tool_calls(default_server):
    reply = default_server.client.chat.completions.create(
        model=default_server.model, temperature=0, max_tokens=64, tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}}, messages=WHAT_TIME)
    assert the_call(reply).function.name == "get_time"
    serial = default_server.client.chat.completions.create(
        model=default_server.model, temperature=0, max_tokens=64, tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}}, messages=WHAT_TIME,
        extra_body={"draft": False})
    assert serial.model_extra["tensorfold"]["token_sha"] == reply.model_extra["tensorfold"]["token_sha"]


def test_auto_answers_with_content_or_tool_calls(default_server):
    reply = default_server.client.chat.completions.create(
        model=default_server.model, temperature=0, max_tokens=24, tools=[WEATHER, TIME], tool_choice="auto",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    message = reply.choices[0].message
    assert message.content or message.tool_calls
    if message.tool_calls:
        assert message.tool_calls[0].function.name in ("get_weather", "get_time")


def test_round_trip_with_a_tool_result_is_answered(default_server):
    messages = [{"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    reply = default_server.client.chat.completions.create(
        model=default_server.model, temperature=0, max_tokens=24, tools=[WEATHER], messages=messages)
    choice = reply.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert choice.message.content or choice.message.tool_calls
    assert reply.usage.prompt_tokens > 100          # the tools, the call and its result were rendered


def test_streamed_required_call_equals_whole(default_server):
    import json

    kw = dict(model=default_server.model, temperature=0, max_tokens=64, tools=[TIME], tool_choice="required",
              messages=WHAT_TIME)
    whole = the_call(default_server.client.chat.completions.create(**kw))
    chunks = list(default_server.client.chat.completions.create(stream=True, **kw))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].function.name == whole.function.name
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == json.loads(whole.function.arguments)
