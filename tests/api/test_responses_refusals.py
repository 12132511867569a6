"""POST /v1/responses refusals: what the server does not run (400
unsupported_parameter) and malformed fields, each the OpenAI envelope before
any event, streamed or not; and the features a response takes through chat
(forced tool calls, reasoning effort, thinking budget, structured output,
images), which answer exactly as the equivalent chat request does: the same
refusal named by the Responses field, or the same tokens."""

from __future__ import annotations

import pytest

from tests.api.api_helpers import assert_envelope
from tests.api.test_responses_types import check_response, check_stream, needs_real_engine, parse_sse

RESPONSES = "/v1/responses"
TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
UNSUPPORTED, NOT_IMPLEMENTED, INVALID, MISSING = ("unsupported_parameter", "not_implemented", "invalid_value",
                                                  "missing_required_parameter")


def user(*parts):
    return [{"role": "user", "content": list(parts)}]


CASES = {
    # built-in tools and the features SPEC.md refuses
    "web search tool": ({"tools": [{"type": "web_search"}]}, "tools", UNSUPPORTED),
    "file search tool": ({"tools": [TOOL, {"type": "file_search", "vector_store_ids": ["vs"]}]}, "tools", UNSUPPORTED),
    "computer use tool": ({"tools": [{"type": "computer_use_preview"}]}, "tools", UNSUPPORTED),
    "built-in tool choice": ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice", UNSUPPORTED),
    "background": ({"background": True}, "background", UNSUPPORTED),
    "include": ({"include": ["reasoning.encrypted_content"]}, "include", UNSUPPORTED),
    "conversation": ({"conversation": "conv_123"}, "conversation", UNSUPPORTED),
    "prompt template": ({"prompt": {"id": "pmpt_123"}}, "prompt", UNSUPPORTED),
    "truncation auto": ({"truncation": "auto"}, "truncation", UNSUPPORTED),
    "top_logprobs": ({"top_logprobs": 3}, "top_logprobs", UNSUPPORTED),
    "input_file": ({"input": user({"type": "input_file", "file_id": "file_1"})}, "input[0].content[0]", UNSUPPORTED),
    "input_file data": ({"input": user({"type": "input_file", "file_data": "data:..."})}, "input[0].content[0]",
                        UNSUPPORTED),
    "image file id": ({"input": user({"type": "input_image", "file_id": "file_1", "detail": "auto"})},
                      "input[0].content[0]", UNSUPPORTED),
    "audio": ({"input": user({"type": "input_audio", "input_audio": {}})}, "input[0].content[0]", UNSUPPORTED),
    "item_reference": ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]", UNSUPPORTED),
    "encrypted reasoning": ({"input": [{"type": "reasoning", "id": "rs_1", "summary": [],
                                        "encrypted_content": "gAAAA"}]}, "input[0].encrypted_content", UNSUPPORTED),
    "built-in tool item": ({"input": [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]},
                           "input[0].type", UNSUPPORTED),
    "unknown previous response": ({"previous_response_id": "resp_unknown"}, "previous_response_id",
                                  "previous_response_not_found"),
    # malformed
    "no input": ({"input": None}, "input", MISSING),
    "input a number": ({"input": 5}, "input", INVALID),
    "unknown item": ({"input": [{"type": "spell"}]}, "input[0].type", INVALID),
    "bad role": ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", INVALID),
    "empty content": ({"input": [{"role": "user", "content": []}]}, "input[0].content", INVALID),
    "image from the assistant": ({"input": [{"role": "assistant", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]}, "input[0].content[0].type", INVALID),
    "unknown part": ({"input": user({"type": "text", "text": "x"})}, "input[0].content[0].type", INVALID),
    "call output without call_id": ({"input": [{"type": "function_call_output", "output": "1"}]},
                                    "input[0].call_id", MISSING),
    "call without name": ({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]},
                          "input[0].name", MISSING),
    "unknown tool_choice name": ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "nope"}},
                                 "tool_choice", INVALID),
    "tool without name": ({"tools": [{"type": "function"}]}, "tools", INVALID),
    "duplicate tools": ({"tools": [TOOL, TOOL]}, "tools", INVALID),
    "bad text format": ({"text": {"format": {"type": "xml"}}}, "text", INVALID),
    "json_schema without schema": ({"text": {"format": {"type": "json_schema", "name": "a"}}}, "text", INVALID),
    "bad verbosity": ({"text": {"verbosity": "extreme"}}, "text", INVALID),
    "bad summary": ({"reasoning": {"summary": "long"}}, "reasoning", INVALID),
    "temperature string": ({"temperature": "hot"}, "temperature", INVALID),
    "top_k fraction": ({"top_k": 1.5}, "top_k", INVALID),
    "min_p above one": ({"min_p": 2}, "min_p", INVALID),
    "seed boolean": ({"seed": True}, "seed", INVALID),
    "stop number": ({"stop": 5}, "stop", INVALID),
    "ignore_eos string": ({"ignore_eos": "yes"}, "ignore_eos", INVALID),
    "draft string": ({"draft": "no"}, "draft", INVALID),
    "priority": ({"priority": "urgent"}, "priority", INVALID),
    "template kwargs": ({"chat_template_kwargs": "x"}, "chat_template_kwargs", INVALID),
    "parallel_tool_calls": ({"parallel_tool_calls": 1}, "parallel_tool_calls", INVALID),
    "max_output_tokens zero": ({"max_output_tokens": 0}, "max_output_tokens", INVALID),
    "max_output_tokens too large": ({"max_output_tokens": 10_000_000}, "max_output_tokens", "context_length_exceeded"),
    "metadata too many": ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", INVALID),
    "metadata value": ({"metadata": {"k": 1}}, "metadata", INVALID),
    "metadata long key": ({"metadata": {"k" * 65: "v"}}, "metadata", INVALID),
    "instructions": ({"instructions": 5}, "instructions", INVALID),
    "store": ({"store": "yes"}, "store", INVALID),
    "stream": ({"stream": 1}, "stream", INVALID),
    "truncation": ({"truncation": "sometimes"}, "truncation", INVALID),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_refused_before_any_event(http, case, stream):
    fields, param, code = CASES[case]
    body = {"input": "Hello.", "max_output_tokens": 4, **fields}
    if stream and "stream" not in fields:
        body["stream"] = True
    error = assert_envelope(http.post(RESPONSES, json=body), 400, param=param)
    assert error["code"] == code, error
    for chat_name in ("messages", "max_completion_tokens", "response_format", "reasoning_effort"):
        assert chat_name not in error["message"], error["message"]


CHAT_TOOL = {"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
# Responses fields, the equivalent chat fields, the Responses param of a refusal
THROUGH_CHAT = {
    "tool_choice required": ({"tools": [TOOL], "tool_choice": "required"},
                             {"tools": [CHAT_TOOL], "tool_choice": "required"}, "tool_choice"),
    "tool_choice function": ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "get_weather"}},
                             {"tools": [CHAT_TOOL], "tool_choice": {"type": "function",
                                                                    "function": {"name": "get_weather"}}},
                             "tool_choice"),
    "allowed_tools required": ({"tools": [TOOL, {**TOOL, "name": "other"}],
                                "tool_choice": {"type": "allowed_tools", "mode": "required",
                                                "tools": [{"type": "function", "name": "get_weather"}]}},
                               {"tools": [CHAT_TOOL], "tool_choice": "required"}, "tool_choice"),
    "allowed_tools auto": ({"tools": [TOOL, {**TOOL, "name": "other"}],
                            "tool_choice": {"type": "allowed_tools", "mode": "auto",
                                            "tools": [{"type": "function", "name": "get_weather"}]}},
                           {"tools": [CHAT_TOOL], "tool_choice": "auto"}, "tool_choice"),
    "reasoning effort": ({"reasoning": {"effort": "low"}}, {"reasoning_effort": "low"}, "reasoning.effort"),
    "reasoning effort none": ({"reasoning": {"effort": "none"}}, {"reasoning_effort": "none"}, "reasoning.effort"),
    "thinking_budget": ({"thinking_budget": 64}, {"thinking_budget": 64}, "thinking_budget"),
    "json_object": ({"text": {"format": {"type": "json_object"}}}, {"response_format": {"type": "json_object"}},
                    "text.format"),
    "json_schema": ({"text": {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA, "strict": True}}},
                    {"response_format": {"type": "json_schema",
                                         "json_schema": {"name": "a", "schema": SCHEMA, "strict": True}}},
                    "text.format"),
    "json_schema and a forced call": (
        {"tools": [TOOL], "tool_choice": "required",
         "text": {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA}}},
        {"tools": [CHAT_TOOL], "tool_choice": "required",
         "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}}, None),
    "image url": ({"input": user({"type": "input_text", "text": "Hello."},
                                 {"type": "input_image", "image_url": "data:image/png;base64,AAAA"})},
                  {"messages": [{"role": "user", "content": [
                      {"type": "text", "text": "Hello."},
                      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}, "input"),
}


@pytest.mark.parametrize("case", THROUGH_CHAT, ids=list(THROUGH_CHAT))
def test_features_answer_as_the_equivalent_chat_request(http, server, case):
    fields, chat_fields, param = THROUGH_CHAT[case]
    if "text" in fields:
        needs_real_engine(server)
    chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hello."}],
                                                   "max_tokens": 12, "seed": 4, **chat_fields})
    response = http.post(RESPONSES, json={"input": "Hello.", "max_output_tokens": 12, "seed": 4, **fields})
    assert response.status_code == chat.status_code, (response.text, chat.text)
    if chat.status_code == 400:
        mine, theirs = response.json()["error"], chat.json()["error"]
        assert mine["code"] == theirs["code"] and mine["type"] == theirs["type"]
        if theirs["param"] in ("tool_choice", "tools", "thinking_budget"):
            assert mine["param"] == theirs["param"]
        else:
            assert mine["param"] == param, (mine, theirs)
        for chat_name in ("messages", "max_completion_tokens", "response_format", "reasoning_effort"):
            assert chat_name not in mine["message"].lower(), mine["message"]
    else:
        assert response.status_code == 200, response.text
        check_response(response.json())
        assert response.json()["tensorfold"]["token_sha"] == chat.json()["tensorfold"]["token_sha"]
        streamed = http.post(RESPONSES, json={"input": "Hello.", "max_output_tokens": 12, "seed": 4, "stream": True,
                                              **fields})
        final = check_stream(parse_sse(streamed.text))
        assert final["tensorfold"]["token_sha"] == chat.json()["tensorfold"]["token_sha"]
        no_ids = lambda items: [{k: v for k, v in i.items() if k not in ("id", "call_id")} for i in items]  # noqa: E731
        assert no_ids(final["output"]) == no_ids(response.json()["output"])


def test_unknown_model_is_404(http):
    error = assert_envelope(http.post(RESPONSES, json={"input": "Hi.", "model": "gpt-9"}), 404, param="model")
    assert error["code"] == "model_not_found"


def test_off_values_are_accepted(http):
    """The refused fields' off values ask for nothing and pass."""
    r = http.post(RESPONSES, json={"input": "Hi.", "max_output_tokens": 2, "background": False, "include": [],
                                   "truncation": "disabled", "top_logprobs": 0, "reasoning": {"summary": "auto"},
                                   "text": {"format": {"type": "text"}}, "tool_choice": "none", "tools": [TOOL],
                                   "thinking_budget": 0, "stream_options": {"include_obfuscation": False},
                                   "user": "someone", "service_tier": "auto"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["reasoning"] == {"effort": None, "summary": "auto"} and body["tool_choice"] == "none"
    assert body["tools"] == [TOOL] and body["user"] == "someone"


def test_a_streamed_refusal_is_json_not_a_stream(http):
    r = http.post(RESPONSES, json={"input": "Hi.", "stream": True, "background": True})
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize("query", [{"stream": "true"}])
def test_retrieve_refuses_streaming(http, query):
    created = http.post(RESPONSES, json={"input": "Hi.", "max_output_tokens": 2}).json()
    assert_envelope(http.get(f"{RESPONSES}/{created['id']}", params=query), 400, param="stream")

