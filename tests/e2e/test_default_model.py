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
        assert reply.choices[0].finish_reason == "tool_calls"
    else:                                  # the model's arguments were malformed: the call stays content
        assert message.content.startswith('<tool_call>\n{"name": "get_weather"')
