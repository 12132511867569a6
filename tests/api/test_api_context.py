"""Prompt plus reply limit must fit the served window (SPEC 0.3.5): an explicit
limit that does not fit is a 400 with both counts and how to fit, before a
stream opens; without one, the default is capped to what is left. When the
engine's window was cut to the memory its KV cache got (kv_plan), the refusal
says so and how to raise it."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tensorfold.api.request.build import fit_reply_limit
from tensorfold.api.errors import APIError
from tests.api.api_helpers import CHAT, COMPLETIONS, HELLO, assert_envelope
from tests.api.conftest import api_config
from tests.api.fake_engine import FakeEngine, FakeKVPlan
from tests.servers import running

MEMORY_NOTE = "limited by the memory available for the KV cache"


def window(http) -> int:
    return http.get("/health").json()["context_length"]


def prompt_tokens(http, body: dict, path: str = CHAT) -> int:
    r = http.post(path, json={**body, "max_tokens": 1})
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_explicit_limit_past_the_window_is_refused_with_counts(http, field, stream):
    ctx = window(http)
    p = prompt_tokens(http, {"messages": HELLO})
    room = ctx - p
    error = assert_envelope(http.post(CHAT, json={"messages": HELLO, field: room + 5, "stream": stream}), 400, field)
    assert error["code"] == "context_length_exceeded"
    message = error["message"]
    for number in (p, room + 5, ctx, 5, room):
        assert re.search(rf"\b{number}\b", message), (number, message)
    assert f"at most {room}" in message


def test_a_limit_that_exactly_fills_the_window_is_accepted(http):
    ctx = window(http)
    ids = (list(range(3, 13)) * (ctx // 10 + 1))[:ctx - 4]
    r = http.post(COMPLETIONS, json={"prompt": ids, "max_tokens": 4, "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] + r.json()["usage"]["completion_tokens"] <= ctx
    assert_envelope(http.post(COMPLETIONS, json={"prompt": ids, "max_tokens": 5}), 400, "max_tokens")


def test_completions_explicit_limit_past_the_window(http):
    ctx = window(http)
    p = prompt_tokens(http, {"prompt": "Once upon a time"}, COMPLETIONS)
    error = assert_envelope(http.post(COMPLETIONS, json={"prompt": "Once upon a time",
                                                         "max_tokens": ctx}), 400, "max_tokens")
    assert f"at most {ctx - p}" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_that_fills_the_window_is_refused(http, stream):
    ctx = window(http)
    long = {"messages": [{"role": "user", "content": " hello" * (ctx + 8)}], "stream": stream}
    error = assert_envelope(http.post(CHAT, json=long), 400, "messages")
    assert error["code"] == "context_length_exceeded"
    assert str(ctx) in error["message"]
    ids = list(range(3, 3 + 10)) * (ctx // 10 + 1)
    error = assert_envelope(http.post(COMPLETIONS, json={"prompt": ids[:ctx], "stream": stream}), 400, "prompt")
    assert "shorten the prompt by at least 1 token" in error["message"]


def test_without_a_limit_the_reply_is_capped_to_the_window(http):
    ctx = window(http)
    ids = (list(range(3, 13)) * (ctx // 10 + 1))[:ctx - 3]
    r = http.post(COMPLETIONS, json={"prompt": ids, "ignore_eos": True})
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["completion_tokens"] <= 3
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= ctx


@pytest.mark.parametrize("prompt, explicit, default, expected", [
    (10, None, None, 90), (10, None, 50, 50), (10, None, 500, 90), (10, 90, None, 90), (10, 5, 500, 5),
])
def test_fit_reply_limit(prompt, explicit, default, expected):
    assert fit_reply_limit(prompt, 100, explicit, "max_tokens", default, prompt_param="prompt") == expected


def test_fit_reply_limit_message():
    with pytest.raises(APIError) as info:
        fit_reply_limit(7990, 8192, 500, "max_tokens", None, prompt_param="messages")
    assert info.value.message == ("The prompt has 7990 tokens and 'max_tokens' is 500, which exceeds the "
                                  "8192-token context by 298; lower 'max_tokens' to at most 202 or shorten the prompt")
    assert info.value.param == "max_tokens"
    with pytest.raises(APIError) as info:
        fit_reply_limit(8192, 8192, None, "max_tokens", None, prompt_param="messages")
    assert info.value.param == "messages" and "at least 1 token" in info.value.message


def test_fit_reply_limit_message_when_memory_limits_the_window():
    with pytest.raises(APIError) as info:
        fit_reply_limit(7990, 8192, 500, "max_tokens", None, prompt_param="messages", memory_limited=True)
    assert info.value.message == (
        "The prompt has 7990 tokens and 'max_tokens' is 500, which exceeds the 8192-token context by 298; "
        "lower 'max_tokens' to at most 202 or shorten the prompt. The 8192-token context is limited by the "
        "memory available for the KV cache; a larger --kv-memory, or freeing memory before starting the "
        "server, raises it")
    with pytest.raises(APIError) as info:
        fit_reply_limit(8192, 8192, None, "max_tokens", None, prompt_param="messages", memory_limited=True)
    assert "shorten the prompt by at least 1 token. The 8192-token context is " + MEMORY_NOTE in info.value.message
    assert fit_reply_limit(10, 100, 90, "max_tokens", None, prompt_param="prompt", memory_limited=True) == 90


@pytest.fixture(scope="module", params=[True, False], ids=["memory-limited", "model-limited"])
def planned(request) -> Iterator[tuple[httpx.Client, bool]]:
    """A FakeEngine with a kv_plan whose window is (or is not) cut by memory."""
    plan = FakeKVPlan(num_blocks=8, block_size=32, context_length=256, limited_by_memory=request.param)
    with running(FakeEngine(context_length=256, kv_plan=plan), api_config()) as served:
        with httpx.Client(base_url=served.url, timeout=30) as http:
            yield http, request.param


@pytest.mark.parametrize("stream", [False, True])
def test_refusals_say_when_memory_limits_the_window(planned, stream):
    http, limited = planned
    p = prompt_tokens(http, {"messages": HELLO})
    room = 256 - p
    error = assert_envelope(http.post(CHAT, json={"messages": HELLO, "max_tokens": room + 1, "stream": stream}),
                            400, "max_tokens")
    assert error["code"] == "context_length_exceeded"
    assert f"The prompt has {p} tokens and 'max_tokens' is {room + 1}" in error["message"]
    assert f"at most {room}" in error["message"]
    assert (MEMORY_NOTE in error["message"]) is limited
    assert ("--kv-memory" in error["message"]) is limited
    error = assert_envelope(http.post(COMPLETIONS, json={"prompt": list(range(3, 259)), "stream": stream}),
                            400, "prompt")
    assert "shorten the prompt by at least 1 token" in error["message"]
    assert (MEMORY_NOTE in error["message"]) is limited
    ok = http.post(CHAT, json={"messages": HELLO, "max_tokens": room})
    assert ok.status_code == 200, ok.text


def test_an_engine_without_a_plan_says_nothing_of_memory(fake_http, fake_server):
    assert getattr(fake_server.engine, "kv_plan", None) is None
    error = assert_envelope(fake_http.post(COMPLETIONS, json={"prompt": "Once", "max_tokens": 10_000}),
                            400, "max_tokens")
    assert MEMORY_NOTE not in error["message"] and "--kv-memory" not in error["message"]
