"""The bad-input matrix: every malformed or unsupported value is a 400 OpenAI
envelope naming its field, before any token, and, for stream: true, before a
stream opens (the reply is JSON, not text/event-stream)."""

from __future__ import annotations

import json

import pytest

from tests.api.api_helpers import CHAT, COMPLETIONS, assert_envelope

USER = {"role": "user", "content": "hi"}


def chat(**fields):
    return {"messages": [USER], **fields}


def with_messages(*messages):
    return {"messages": list(messages)}


def part(kind, **fields):
    return {"type": kind, **fields}


CHAT_CASES = {
    # messages
    "messages missing": ({}, "messages"),
    "messages empty": ({"messages": []}, "messages"),
    "messages a string": ({"messages": "hi"}, "messages"),
    "message not an object": (with_messages("hi"), "messages[0]"),
    "role unknown": (with_messages({"role": "wizard", "content": "hi"}), "messages[0].role"),
    "role missing": (with_messages({"content": "hi"}), "messages[0].role"),
    "role function": (with_messages({"role": "function", "content": "hi", "name": "f"}), "messages[0].role"),
    "role not a string": (with_messages({"role": 1, "content": "hi"}), "messages[0].role"),
    "content a number": (with_messages({"role": "user", "content": 5}), "messages[0].content"),
    "content missing": (with_messages({"role": "user"}), "messages[0].content"),
    "content null for system": (with_messages({"role": "system", "content": None}, USER), "messages[0].content"),
    "content empty parts": (with_messages({"role": "user", "content": []}), "messages[0].content"),
    "image_url part": (with_messages({"role": "user", "content": [part("text", text="a"), part(
        "image_url", image_url={"url": "http://x/y.png"})]}), "messages[0].content"),
    "input_audio part": (with_messages({"role": "user", "content": [part(
        "input_audio", input_audio={"data": "AAAA", "format": "wav"})]}), "messages[0].content"),
    "video_url part": (with_messages({"role": "user", "content": [part("video_url", video_url={"url": "x"})]}),
                       "messages[0].content"),
    "unknown part type": (with_messages({"role": "user", "content": [part("hologram")]}), "messages[0].content"),
    "part without type": (with_messages({"role": "user", "content": [{"text": "a"}]}), "messages[0].content"),
    "text part text not string": (with_messages({"role": "user", "content": [part("text", text=3)]}),
                                  "messages[0].content"),
    "tool message without tool_call_id": (with_messages(USER, {"role": "tool", "content": "42"}),
                                          "messages[1].tool_call_id"),
    "tool_calls on a user message": (with_messages({"role": "user", "content": "x", "tool_calls": []}),
                                     "messages[0].tool_calls"),
    "tool call arguments a number": (with_messages(USER, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": 5}}]}),
        "messages[1].tool_calls[0].function.arguments"),
    "name not a string": (with_messages({"role": "user", "content": "x", "name": 3}), "messages[0].name"),
    # unsupported generation features
    "n 2": (chat(n=2), "n"), "n 0": (chat(n=0), "n"), "n string": (chat(n="1"), "n"),
    "logprobs true": (chat(logprobs=True), "logprobs"), "logprobs string": (chat(logprobs="yes"), "logprobs"),
    "top_logprobs": (chat(top_logprobs=3), "top_logprobs"),
    "audio": (chat(audio={"voice": "alloy", "format": "wav"}), "audio"),
    "modalities audio": (chat(modalities=["text", "audio"]), "modalities"),
    "modalities not a list": (chat(modalities="text"), "modalities"),
    # sampling controls
    **{f"temperature {v!r}": (chat(temperature=v), "temperature") for v in (True, "0.5", "hot", -0.1, [1], {})},
    **{f"top_p {v!r}": (chat(top_p=v), "top_p") for v in (0, 1.5, -1, True, "1")},
    **{f"top_k {v!r}": (chat(top_k=v), "top_k") for v in (2.5, True, "5", 1 << 40)},
    **{f"min_p {v!r}": (chat(min_p=v), "min_p") for v in (-0.1, 1.1, "0.1", False)},
    **{f"seed {v!r}": (chat(seed=v), "seed") for v in (1.5, True, "42", 1 << 64, -(1 << 63) - 1)},
    # limits, stop, flags
    **{f"max_tokens {v!r}": (chat(max_tokens=v), "max_tokens") for v in (0, -1, 1.5, True, "10")},
    **{f"max_completion_tokens {v!r}": (chat(max_completion_tokens=v), "max_completion_tokens")
       for v in (0, False, 2.2)},
    **{f"stop {v!r}": (chat(stop=v), "stop") for v in (5, [1], [""], "", ["a"] * 17, {"a": 1}, ["a", None])},
    **{f"ignore_eos {v!r}": (chat(ignore_eos=v), "ignore_eos") for v in ("true", 1, 0, [])},
    **{f"stream {v!r}": (chat(stream=v), "stream") for v in ("yes", 1)},
    "stream_options not an object": (chat(stream_options="x"), "stream_options"),
    "include_usage not a bool": (chat(stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
    **{f"chat_template_kwargs {v!r}": (chat(chat_template_kwargs=v), "chat_template_kwargs")
       for v in ("x", [1], 3, True)},
    "chat_template_kwargs reserved key": (chat(chat_template_kwargs={"tools": []}), "chat_template_kwargs.tools"),
    **{f"priority {v!r}": (chat(priority=v), "priority") for v in ("urgent", 1, True)},
    "model not a string": (chat(model=5), "model"),
    # tools
    "tools a string": (chat(tools="x"), "tools"),
    "built-in tool": (chat(tools=[{"type": "web_search"}]), "tools"),
    "tool without function": (chat(tools=[{"type": "function"}]), "tools"),
    "tool_choice unknown": (chat(tool_choice="sometimes"), "tool_choice"),
    # SPEC features not implemented yet: refused, never silently ignored
    "tool_choice required": (chat(tool_choice="required"), "tool_choice"),
    # structured outputs: malformed values, grammars that do not compile, conflicts
    "response_format unknown type": (chat(response_format={"type": "yaml"}), "response_format"),
    "response_format schema missing": (chat(response_format={"type": "json_schema", "json_schema": {}}),
                                       "response_format"),
    "response_format not an object": (chat(response_format="json"), "response_format"),
    "guided_json a number": (chat(guided_json=3), "guided_json"),
    "guided_regex empty": (chat(guided_regex=""), "guided_regex"),
    "guided_regex does not compile": (chat(guided_regex="a(b"), "guided_regex"),
    "guided_choice empty": (chat(guided_choice=[]), "guided_choice"),
    "guided_choice not strings": (chat(guided_choice=["a", 1]), "guided_choice"),
    "guided_grammar does not compile": (chat(guided_grammar="root ::= (("), "guided_grammar"),
    "guided_json schema does not compile": (chat(guided_json={"type": "objectx"}), "guided_json"),
    "structured_outputs two kinds": (chat(structured_outputs={"regex": "a", "choice": ["b"]}),
                                     "structured_outputs"),
    "structured_outputs none": (chat(structured_outputs={}), "structured_outputs"),
    "two grammar fields": (chat(guided_regex="a+", guided_choice=["a"]), "guided_choice"),
    "reasoning_effort unknown": (chat(reasoning_effort="extreme"), "reasoning_effort"),
    "reasoning_effort a number": (chat(reasoning_effort=3), "reasoning_effort"),
    "template reasoning_effort unknown": (chat(chat_template_kwargs={"reasoning_effort": "max"}),
                                          "chat_template_kwargs.reasoning_effort"),
    "thinking_budget negative": (chat(thinking_budget=-1), "thinking_budget"),
    "thinking_budget fractional": (chat(thinking_budget=2.5), "thinking_budget"),
    "thinking_budget a string": (chat(thinking_budget="64"), "thinking_budget"),
    "draft not a bool": (chat(draft="no"), "draft"),
}

COMPLETION_CASES = {
    "prompt missing": ({}, "prompt"),
    "prompt a number": ({"prompt": 5}, "prompt"),
    "prompt empty list": ({"prompt": []}, "prompt"),
    "several string prompts": ({"prompt": ["a", "b"]}, "prompt"),
    "several token prompts": ({"prompt": [[1, 2], [3]]}, "prompt"),
    "mixed prompt list": ({"prompt": [1, "a"]}, "prompt"),
    "boolean token": ({"prompt": [1, True]}, "prompt"),
    "negative token": ({"prompt": [-1]}, "prompt"),
    "float token": ({"prompt": [1.0]}, "prompt"),
    "out-of-vocabulary token": ({"prompt": [10 ** 9]}, "prompt"),
    "empty inner token list": ({"prompt": [[]]}, "prompt"),
    "echo": ({"prompt": "x", "echo": True}, "echo"),
    "suffix without FIM tokens": ({"prompt": "x", "suffix": "tail"}, "suffix"),
    "suffix a number": ({"prompt": "x", "suffix": 3}, "suffix"),
    "best_of 2": ({"prompt": "x", "best_of": 2}, "best_of"),
    "logprobs": ({"prompt": "x", "logprobs": 1}, "logprobs"),
    "n 3": ({"prompt": "x", "n": 3}, "n"),
    "temperature string": ({"prompt": "x", "temperature": "1"}, "temperature"),
    "top_k fraction": ({"prompt": "x", "top_k": 0.5}, "top_k"),
    "seed bool": ({"prompt": "x", "seed": False}, "seed"),
    "stop list of numbers": ({"prompt": "x", "stop": [1, 2]}, "stop"),
    "ignore_eos string": ({"prompt": "x", "ignore_eos": "no"}, "ignore_eos"),
    "max_tokens zero": ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    "priority number": ({"prompt": "x", "priority": 2}, "priority"),
    "chat_template_kwargs list": ({"prompt": "x", "chat_template_kwargs": []}, "chat_template_kwargs"),
}

# Bodies that must be sent as raw text: JSON's missing literals and a number too big for a float.
RAW_CASES = {
    "temperature NaN": ('{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "temperature"),
    "temperature Infinity": ('{"messages": [{"role": "user", "content": "hi"}], "temperature": Infinity}',
                             "temperature"),
    "top_p -Infinity": ('{"messages": [{"role": "user", "content": "hi"}], "top_p": -Infinity}', "top_p"),
    "top_k Infinity": ('{"messages": [{"role": "user", "content": "hi"}], "top_k": Infinity}', "top_k"),
    "seed NaN": ('{"messages": [{"role": "user", "content": "hi"}], "seed": NaN}', "seed"),
    "min_p 1e400": ('{"messages": [{"role": "user", "content": "hi"}], "min_p": 1e400}', "min_p"),
    "NaN deep in tools": ('{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", '
                          '"function": {"name": "f", "parameters": {"default": NaN}}}]}',
                          "tools[0].function.parameters.default"),
    "not JSON": ("this is not json", None),
    "truncated JSON": ('{"messages": [', None),
    "empty body": ("", None),
    "array body": ('[{"role": "user", "content": "hi"}]', None),
    "string body": ('"hello"', None),
    "invalid UTF-8": (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', None),
    "lone surrogate in content": ('{"messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages[0].content"),
    "lone surrogate in model": ('{"model": "\\udc00", "messages": [{"role": "user", "content": "hi"}]}', "model"),
    "lone surrogate in user": ('{"messages": [{"role": "user", "content": "hi"}], "user": "\\ud800"}', "user"),
    "lone surrogate in a key": ('{"messages": [{"role": "user", "content": "hi"}], "metadata": {"\\ud800": "x"}}',
                                "metadata"),
}


def _post_and_check(http, path, body, param, stream):
    if stream and isinstance(body, dict) and "stream" not in body:
        body = {**body, "stream": True}
    r = http.post(path, json=body)
    error = assert_envelope(r, 400, param)       # JSON, so no stream was opened
    assert error["code"] in ("invalid_value", "missing_required_parameter", "unsupported_parameter",
                             "not_implemented", "invalid_json", "context_length_exceeded")
    return error


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("case", list(CHAT_CASES))
def test_chat_bad_input(http, case, stream):
    body, param = CHAT_CASES[case]
    _post_and_check(http, CHAT, body, param, stream)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("case", list(COMPLETION_CASES))
def test_completions_bad_input(http, case, stream):
    body, param = COMPLETION_CASES[case]
    _post_and_check(http, COMPLETIONS, body, param, stream)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("case", list(RAW_CASES))
def test_raw_bad_bodies(http, path, case):
    """(A completions body with messages is a chat body: the same checks apply.)"""
    text, param = RAW_CASES[case]
    data = text if isinstance(text, bytes) else text.encode()
    r = http.post(path, content=data, headers={"content-type": "application/json"})
    assert_envelope(r, 400, param)


def test_messages_in_completions_body_are_validated_as_chat(http):
    r = http.post(COMPLETIONS, json={"messages": [{"role": "wizard", "content": "x"}]})
    assert_envelope(r, 400, "messages[0].role")


def test_accepted_edge_values(http):
    ok = [chat(top_k=2.0, max_tokens=2), chat(seed=3.0, max_tokens=2), chat(top_k=-1, max_tokens=2),
          chat(top_k=0, max_tokens=2), chat(temperature=0, max_tokens=2), chat(top_p=1, max_tokens=2),
          chat(min_p=0, max_tokens=2), chat(min_p=1, max_tokens=2), chat(n=1, max_tokens=2),
          chat(stop=[], max_tokens=2), chat(stop="x", max_tokens=2), chat(seed=-5, max_tokens=2),
          chat(seed=(1 << 64) - 1, max_tokens=2), chat(logprobs=False, max_tokens=2),
          chat(priority="background", max_tokens=2), chat(stream=False, max_tokens=2),
          chat(chat_template_kwargs={"enable_thinking": False}, max_tokens=2),
          chat(tool_choice="none", tools=[{"type": "function", "function": {"name": "f"}}], max_tokens=2)]
    for body in ok:
        r = http.post(CHAT, json=body)
        assert r.status_code == 200, (body, r.text)


def test_error_message_is_json_serialisable_text(http):
    r = http.post(CHAT, content=json.dumps(chat(temperature="x")), headers={"content-type": "application/json"})
    assert "temperature" in assert_envelope(r, 400, "temperature")["message"]


def test_paired_surrogate_escapes_are_text(http):
    # JSON's escaped pair for one astral character is ordinary text, not a lone surrogate
    body = '{"messages": [{"role": "user", "content": "smile \\ud83d\\ude00"}], "max_tokens": 2}'
    r = http.post(CHAT, content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("field", ["chat_template_kwargs", "tools", "metadata"])
@pytest.mark.parametrize("depth", [65, 500])
def test_deep_nesting_is_a_400(http, field, depth):
    nested = "[" * depth + "]" * depth
    body = '{"messages": [{"role": "user", "content": "hi"}], "%s": {"x": %s}}' % (field, nested)
    error = assert_envelope(http.post(CHAT, content=body.encode(), headers={"content-type": "application/json"}),
                            400, param=f"{field}.x")
    assert "nest more than 64" in error["message"]


def test_nesting_within_the_limit_is_read(http):
    nested = "[" * 60 + "]" * 60
    body = '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "metadata": {"x": %s}}' % nested
    r = http.post(CHAT, content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code != 500 and "nest more" not in r.text


def test_long_stop_string_is_a_400(http):
    assert_envelope(http.post(CHAT, json=chat(stop=["x" * 4097])), 400, param="stop")
    assert http.post(CHAT, json=chat(stop=["x" * 4096], max_tokens=2)).status_code == 200


def test_large_body_is_parsed_off_the_loop_with_the_same_answers(http, monkeypatch):
    # past OFF_LOOP_BYTES the body is parsed on a worker thread: the same checks and replies apply
    from tensorfold.api.request import parsing

    monkeypatch.setattr(parsing, "OFF_LOOP_BYTES", 1024)
    pad = "y" * 100_000
    ok = http.post(CHAT, json={**chat(max_tokens=2), "user": pad})
    assert ok.status_code == 200, ok.text
    bad = http.post(CHAT, content=('{"messages": [{"role": "user", "content": "hi"}], "user": "%s", '
                                   '"temperature": NaN}' % pad).encode(), headers={"content-type": "application/json"})
    assert_envelope(bad, 400, param="temperature")


# -- found by the fuzzer (tests/api/test_api_fuzz.py): each was a 500 -----------------------------

def test_a_template_kwarg_named_like_a_parameter_is_a_400(http):
    for key in ("self", "documents", "sanitize_control_tokens"):
        assert_envelope(http.post(CHAT, json=chat(chat_template_kwargs={key: 1})), 400,
                        param=f"chat_template_kwargs.{key}")


def test_deep_json_inside_strings_is_not_a_500(http):
    deep_args = '{"a":' * 500 + "1" + "}" * 500
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep_args}}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    for args in (deep_args, "[" * 1000 + "]" * 1000):
        call["function"]["arguments"] = args
        r = http.post(CHAT, json=chat(messages=messages, max_tokens=2))     # the text reaches the template
        assert r.status_code == 200 or r.json()["error"]["code"] == "context_length_exceeded", r.text
    r = http.post(CHAT, json=chat(guided_json="[" * 1000 + "]" * 1000))
    assert r.status_code == 400 and "nested too deep" in r.json()["error"]["message"]


def test_a_temperature_beyond_a_float_is_a_400(http):
    body = b'{"messages": [{"role": "user", "content": "hi"}], "temperature": 1' + b"0" * 400 + b"}"
    assert_envelope(http.post(CHAT, content=body, headers={"Content-Type": "application/json"}), 400,
                    param="temperature")


def test_surrogates_written_as_utf8_bytes_are_a_400(http):
    for body in (b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}]}',
                 b'{"prompt": "x", "metadata": {"\xed\xa0\x80": 1}}'):
        error = assert_envelope(http.post(COMPLETIONS, content=body, headers={"Content-Type": "application/json"}),
                                400)
        assert "UTF-8" in error["message"]


def test_a_limit_of_thousands_of_digits_is_a_400(http):
    assert_envelope(http.get("/v1/responses", params={"limit": "0" * 5000 + "1"}), 400, param="limit")


def test_a_body_over_the_limit_closes_the_connection(http):
    r = http.post(CHAT, content=b"{" + b" " * (300 * 1024) + b"}", headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.headers["connection"] == "close"
    assert http.get("/v1/models").status_code == 200
