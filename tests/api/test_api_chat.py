"""Chat and completions replies through the official openai client and raw SSE.

These hold for any engine: shapes, usage, streamed == whole, the last event
(the finish chunk carries usage; the `choices: []` usage chunk follows it only
with stream_options.include_usage).
"""

from __future__ import annotations

import json

import pytest

from tests.api.api_helpers import CHAT, COMPLETIONS, HELLO, sse_events

USAGE_KEYS = {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
              "completion_tokens_details"}
STATS_KEYS = {"token_sha", "time_to_first_token", "decode_tokens_per_second", "prefill_seconds",
              "decode_seconds"}


def check_usage(usage: dict) -> None:
    assert USAGE_KEYS <= set(usage)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens"] > 0
    assert isinstance(usage["prompt_tokens_details"]["cached_tokens"], int)
    assert isinstance(usage["completion_tokens_details"]["reasoning_tokens"], int)


def check_stats(block: dict) -> None:
    assert STATS_KEYS <= set(block)
    assert isinstance(block["token_sha"], str) and len(block["token_sha"]) == 64


def test_chat_whole_reply(client, server):
    reply = client.chat.completions.create(model=server.served_id, messages=HELLO, max_tokens=16, seed=7)
    assert reply.object == "chat.completion"
    assert reply.id.startswith("chatcmpl-")
    assert reply.model == server.served_id
    choice = reply.choices[0]
    assert len(reply.choices) == 1 and choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert 1 <= reply.usage.completion_tokens <= 16
    raw = reply.model_dump()
    check_usage(raw["usage"])
    check_stats(raw["tensorfold"])


def test_chat_stream_equals_whole_and_ends_with_usage(client, server):
    kwargs = dict(model=server.served_id, messages=HELLO, max_tokens=24, seed=11, temperature=0.7)
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    last = chunks[-1]
    assert last.choices[0].finish_reason == whole.choices[0].finish_reason and last.usage is not None
    assert last.usage.model_dump() == whole.usage.model_dump()
    assert last.model_dump()["tensorfold"]["token_sha"] == whole.model_dump()["tensorfold"]["token_sha"]
    assert len({c.id for c in chunks}) == 1


def test_raw_sse_framing(http):
    r = http.post(CHAT, json={"messages": HELLO, "stream": True, "max_tokens": 8})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.text.endswith("data: [DONE]\n\n")
    events = sse_events(r)
    assert events[-1] == "[DONE]"
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    finish = events[-2]
    assert finish["choices"][0]["finish_reason"] in ("stop", "length")
    check_usage(finish["usage"])
    check_stats(finish["tensorfold"])
    assert all("usage" not in e for e in events[:-2])


@pytest.mark.parametrize("path, body", [(CHAT, {"messages": HELLO}), (COMPLETIONS, {"prompt": "Once"})])
@pytest.mark.parametrize("options", [None, {}, {"include_usage": False}, {"include_usage": None}])
def test_without_include_usage_the_finish_chunk_is_last_and_carries_usage(http, path, body, options):
    body = {**body, "stream": True, "max_tokens": 6, **({} if options is None else {"stream_options": options})}
    events = sse_events(http.post(path, json=body))
    assert events[-1] == "[DONE]"
    assert all(e["choices"] for e in events[:-1])           # no `choices: []` chunk
    assert events[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    check_usage(events[-2]["usage"])


@pytest.mark.parametrize("path, body", [(CHAT, {"messages": HELLO}), (COMPLETIONS, {"prompt": "Once"})])
def test_include_usage_adds_the_usage_chunk_after_the_finish_chunk(http, path, body):
    body = {**body, "stream": True, "max_tokens": 6, "stream_options": {"include_usage": True}}
    events = sse_events(http.post(path, json=body))
    finish, usage = events[-3], events[-2]
    assert finish["choices"][0]["finish_reason"] in ("stop", "length")
    assert usage["choices"] == []
    check_usage(usage["usage"])
    assert usage["usage"] == finish["usage"] and usage["tensorfold"] == finish["tensorfold"]
    assert usage["id"] == finish["id"] and usage["object"] == finish["object"]
    assert [e for e in events[:-1] if not e["choices"]] == [usage]


def test_openai_streaming_quickstart_runs(client, server, capsys):
    """The OpenAI quickstart reads `chunk.choices[0]` of every chunk."""
    stream = client.chat.completions.create(model=server.served_id, messages=HELLO, max_tokens=8, stream=True)
    for chunk in stream:
        print(chunk.choices[0].delta.content)
    stream = client.completions.create(model=server.served_id, prompt="Once", max_tokens=8, stream=True)
    for chunk in stream:
        print(chunk.choices[0].text)
    assert capsys.readouterr().out


def test_openai_client_include_usage(client, server):
    kw = dict(model=server.served_id, max_tokens=8, seed=4, stream=True, stream_options={"include_usage": True})
    chats = list(client.chat.completions.create(messages=HELLO, **kw))
    texts = list(client.completions.create(prompt="Once", **kw))
    for chunks in (chats, texts):
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 1
        assert chunks[-2].choices[0].finish_reason and chunks[-2].usage == chunks[-1].usage


def test_max_tokens_caps_the_reply(client, server):
    reply = client.chat.completions.create(model=server.served_id, messages=HELLO, max_tokens=1)
    assert reply.usage.completion_tokens <= 1
    reply = client.chat.completions.create(model=server.served_id, messages=HELLO,
                                           max_completion_tokens=2, extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 2 and reply.choices[0].finish_reason == "length"


def test_completions_string_prompt(client, server):
    reply = client.completions.create(model=server.served_id, prompt="Once upon a time", max_tokens=8, seed=3)
    assert reply.object == "text_completion"
    assert reply.id.startswith("cmpl-")
    assert isinstance(reply.choices[0].text, str)
    assert reply.choices[0].finish_reason in ("stop", "length")
    check_usage(reply.model_dump()["usage"])
    check_stats(reply.model_dump()["tensorfold"])


def test_completions_prompt_forms_agree(client, server):
    tok = server.engine.tokenizer
    ids = tok.encode("Once upon a time", add_special_tokens=True)
    kw = dict(model=server.served_id, max_tokens=6, seed=5)
    replies = [client.completions.create(prompt=p, **kw) for p in ("Once upon a time", ["Once upon a time"],
                                                                  ids, [ids])]
    assert len({r.choices[0].text for r in replies}) == 1
    assert {r.usage.prompt_tokens for r in replies} == {len(ids)}


def test_completions_stream_equals_whole(client, server):
    kw = dict(model=server.served_id, prompt="The sea", max_tokens=12, seed=9, temperature=0.8)
    whole = client.completions.create(**kw)
    chunks = list(client.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] \
        == [whole.choices[0].finish_reason]


def test_completions_raw_stream_framing(http):
    events = sse_events(http.post(COMPLETIONS, json={"prompt": "Hi", "stream": True, "max_tokens": 4}))
    assert events[-1] == "[DONE]"
    assert all(e["object"] == "text_completion" for e in events[:-1])
    check_usage(events[-2]["usage"])


def test_completions_body_with_messages_uses_chat_handling(http):
    body = {"messages": HELLO, "max_tokens": 8, "seed": 1}
    via_completions = http.post(COMPLETIONS, json={**body, "prompt": "ignored"}).json()
    via_chat = http.post(CHAT, json=body).json()
    assert via_completions["object"] == "chat.completion"
    assert via_completions["choices"][0]["message"] == via_chat["choices"][0]["message"]
    assert via_completions["usage"] == via_chat["usage"]


def test_parts_content_equals_string_content(http):
    parts = [{"type": "text", "text": "Say "}, {"type": "text", "text": "hello."}]
    a = http.post(CHAT, json={"messages": [{"role": "user", "content": parts}], "max_tokens": 6}).json()
    b = http.post(CHAT, json={"messages": HELLO, "max_tokens": 6}).json()
    assert a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"]
    assert a["choices"][0]["message"] == b["choices"][0]["message"]


def test_developer_message_renders_as_system(http):
    def prompt_tokens(role: str) -> int:
        msgs = [{"role": role, "content": "Be brief."}, *HELLO]
        return http.post(CHAT, json={"messages": msgs, "max_tokens": 1}).json()["usage"]["prompt_tokens"]
    assert prompt_tokens("developer") == prompt_tokens("system")


def test_unknown_fields_are_listed_as_ignored(http):
    r = http.post(CHAT, json={"messages": HELLO, "max_tokens": 2, "user": "me", "metadata": {"a": "b"},
                              "frequency_penalty": 0, "service_tier": "auto", "store": False,
                              "prompt_cache_key": "k", "safety_identifier": "s",
                              "some_future_field": [1, 2], "verbosity": "low"})
    assert r.status_code == 200, r.text
    assert r.json()["tensorfold"]["ignored_fields"] == ["some_future_field", "verbosity"]
    streamed = http.post(CHAT, json={"messages": HELLO, "max_tokens": 2, "stream": True, "zzz": 1})
    finish = [json.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: {")][-1]
    assert finish["tensorfold"]["ignored_fields"] == ["zzz"]
    known = http.post(CHAT, json={"messages": HELLO, "max_tokens": 2, "user": "me"}).json()
    assert "ignored_fields" not in known["tensorfold"]


def test_documented_no_op_fields_are_type_checked(http):
    for field, value in (("user", 5), ("metadata", {"a": 1}), ("service_tier", "fastest"), ("store", "yes")):
        r = http.post(CHAT, json={"messages": HELLO, "max_tokens": 2, field: value})
        assert r.status_code == 400 and r.json()["error"]["param"].startswith(field), (field, r.text)


def test_null_fields_keep_defaults(http):
    r = http.post(CHAT, json={"messages": HELLO, "max_tokens": 2, "temperature": None, "top_p": None,
                              "top_k": None, "min_p": None, "seed": None, "stop": None, "n": None,
                              "logprobs": None, "ignore_eos": None, "chat_template_kwargs": None,
                              "priority": None, "stream": None, "model": None, "modalities": ["text"],
                              "n_": 1, "top_logprobs": None, "response_format": {"type": "text"},
                              "draft": True, "thinking_budget": 0})
    assert r.status_code == 200, r.text
