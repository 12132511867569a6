"""Function calls in responses, end to end on the real engine.

The tiny random model cannot decide to call a tool, so a json_schema
text.format makes its reply a plain JSON call, and a server started with
--tool-parser json reads it as one (as chat does): the response's output is
a function_call item. Its output goes back as input (function_call_output,
through previous_response_id) as the messages a chat client would send.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tensorfold.config import EngineConfig, ServerConfig
from tensorfold.engine.async_engine import AsyncEngine
from tests.api.test_responses_types import check_response, check_stream, parse_sse
from tests.servers import running

RESPONSES, CHAT = "/v1/responses", "/v1/chat/completions"
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "name": "get_weather", "parameters": PARAMS}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
CALL_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "arguments"], "properties": {
    "name": {"const": "get_weather"},
    "arguments": {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"],
                  "additionalProperties": False}}}
TWO_CALLS = {"type": "array", "items": CALL_SCHEMA, "minItems": 2, "maxItems": 2}
QUESTION = "Weather in Paris?"


@pytest.fixture(scope="module")
def served(tiny_model):
    engine = AsyncEngine(tiny_model, EngineConfig(dtype="float32", device="cpu", kv_memory=0.1))
    with running(engine, ServerConfig(tool_parser="json")) as served:
        yield served


@pytest.fixture(scope="module")
def http(served):
    with httpx.Client(base_url=served.url, timeout=60) as client:
        yield client


def forced(schema=CALL_SCHEMA, **extra) -> dict:
    return {"input": QUESTION, "tools": [TOOL], "max_output_tokens": 80, "seed": 3,
            "text": {"format": {"type": "json_schema", "name": "call", "schema": schema}}} | extra


def without_ids(output: list[dict]) -> list[dict]:
    return [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in output]


def test_a_call_is_a_function_call_item_streamed_and_whole(http):
    whole = http.post(RESPONSES, json=forced()).json()
    check_response(whole)
    (call,) = whole["output"]
    assert call["type"] == "function_call" and call["name"] == "get_weather" and call["status"] == "completed"
    assert call["call_id"].startswith("call_") and json.loads(call["arguments"])["city"] in ("Paris", "Oslo")
    events = parse_sse(http.post(RESPONSES, json=forced(stream=True)).text)
    final = check_stream(events)
    assert without_ids(final["output"]) == without_ids(whole["output"])
    assert final["tensorfold"]["token_sha"] == whole["tensorfold"]["token_sha"]
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.done" in kinds and "response.output_text.delta" not in kinds
    streamed_args = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    assert streamed_args == call["arguments"]


def test_the_call_equals_the_chat_completions_call(http):
    response = http.post(RESPONSES, json=forced()).json()
    chat = http.post(CHAT, json={"messages": [{"role": "user", "content": QUESTION}], "tools": [CHAT_TOOL],
                                 "max_tokens": 80, "seed": 3, "response_format": {
                                     "type": "json_schema", "json_schema": {"name": "call", "schema": CALL_SCHEMA}}}
                     ).json()
    (chat_call,) = chat["choices"][0]["message"]["tool_calls"]
    (call,) = response["output"]
    assert (call["name"], call["arguments"]) == (chat_call["function"]["name"], chat_call["function"]["arguments"])
    assert response["tensorfold"]["token_sha"] == chat["tensorfold"]["token_sha"]


def test_parallel_tool_calls_false_keeps_the_first_call(http):
    both = http.post(RESPONSES, json=forced(TWO_CALLS, max_output_tokens=200)).json()
    first = http.post(RESPONSES, json=forced(TWO_CALLS, max_output_tokens=200, parallel_tool_calls=False)).json()
    check_response(first)
    assert [i["type"] for i in both["output"]] == ["function_call", "function_call"]
    assert without_ids(first["output"]) == without_ids(both["output"][:1])
    assert first["parallel_tool_calls"] is False
    assert first["usage"]["output_tokens"] == both["usage"]["output_tokens"]


def test_the_call_output_continues_the_conversation_as_chat_would(http, served):
    with openai.OpenAI(base_url=served.base_url, api_key="x", max_retries=0, timeout=60) as client:
        first = client.responses.create(**{k: v for k, v in forced().items() if k != "seed"},
                                        model=served.served_id, extra_body={"seed": 3})
        call = first.output[0]
        assert call.type == "function_call"
        second = client.responses.create(model=served.served_id, previous_response_id=first.id, tools=[TOOL],
                                         input=[{"type": "function_call_output", "call_id": call.call_id,
                                                 "output": "18C and sunny"}],
                                         max_output_tokens=6, extra_body={"seed": 9})
    check_response(second.model_dump(mode="json", exclude_unset=True))
    chat = http.post(CHAT, json={"messages": [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "18C and sunny"}],
        "tools": [CHAT_TOOL], "max_tokens": 6, "seed": 9}).json()
    assert second.usage.input_tokens == chat["usage"]["prompt_tokens"]
    assert second.model_dump()["tensorfold"]["token_sha"] == chat["tensorfold"]["token_sha"]
