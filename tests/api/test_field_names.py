"""request/names.py: a refusal on the shared request path names its field as the route
that took the request does (chat's names, or the Responses API's)."""

from __future__ import annotations

import asyncio

from tensorfold.api.request.names import field_name, speaking
from tensorfold.api.responses.to_chat import RESPONSES_NAMES


def test_chat_names_by_default():
    for path in ("messages[2].content", "max_tokens", "response_format.json_schema", "temperature"):
        assert field_name(path) == path


def test_responses_names_inside_speaking():
    with speaking(RESPONSES_NAMES):
        assert field_name("messages[2].content") == "input"
        assert field_name("messages") == "input"
        assert field_name("max_completion_tokens") == "max_output_tokens"
        assert field_name("max_tokens") == "max_output_tokens"
        assert field_name("response_format") == "text.format"
        assert field_name("response_format.json_schema.schema") == "text.format.json_schema.schema"
        assert field_name("reasoning_effort") == "reasoning.effort"
        assert field_name("tool_choice") == "tool_choice"
        assert field_name("temperature") == "temperature"
    assert field_name("messages[0]") == "messages[0]"          # the vocabulary ends with the block


def test_worker_threads_speak_the_route_vocabulary():
    async def run() -> tuple[str, str]:
        with speaking(RESPONSES_NAMES):
            inside = await asyncio.to_thread(field_name, "max_tokens")
        return inside, await asyncio.to_thread(field_name, "max_tokens")

    assert asyncio.run(run()) == ("max_output_tokens", "max_tokens")


def test_a_chat_request_after_a_responses_refusal_keeps_chat_names(http):
    big = {"max_output_tokens": 10_000_000}
    assert http.post("/v1/responses", json={"input": "Hi", **big}).json()["error"]["param"] == "max_output_tokens"
    chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                   "max_tokens": 10_000_000})
    assert chat.json()["error"]["param"] == "max_tokens"
    assert "'max_tokens'" in chat.json()["error"]["message"]
