"""Request limits (--limit NAME=VALUE): each a 400 (413 for the body) naming its field and
the flag, checked before validation; and /health stays quick while a large body is read."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.api.api_helpers import assert_envelope
from tests.api.conftest import api_config
from tests.api.fake_engine import FakeEngine
from tests.servers import running
from tensorfold.config import Limits

SMALL = Limits(body_bytes=64 * 1024, messages=3, message_chars=100, stop_strings=2, stop_chars=5,
               grammar_bytes=200, depth=8)
CHAT, COMPLETIONS, RESPONSES = "/v1/chat/completions", "/v1/completions", "/v1/responses"


@pytest.fixture(scope="module")
def small() -> Iterator[httpx.Client]:
    with running(FakeEngine(), api_config(limits=SMALL)) as served:
        with httpx.Client(base_url=served.url, timeout=30) as client:
            yield client


def chat(**extra):
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **extra}


def refused(response: httpx.Response, param: str, limit: str, status: int = 400) -> None:
    error = assert_envelope(response, status, param=param)
    assert f"--limit {limit}=" in error["message"], error


CASES = {
    "messages": (CHAT, {"messages": [{"role": "user", "content": "x"}] * 4}, "messages", "messages"),
    "message chars": (CHAT, {"messages": [{"role": "user", "content": "x" * 101}]}, "messages[0]",
                      "message_chars"),
    "message parts": (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "x" * 60}] * 2}]},
                      "messages[0]", "message_chars"),
    "prompt chars": (COMPLETIONS, {"prompt": "x" * 101}, "prompt", "message_chars"),
    "suffix chars": (COMPLETIONS, {"prompt": "x", "suffix": "y" * 101}, "suffix", "message_chars"),
    "stop count": (CHAT, chat(stop=["a", "b", "c"]), "stop", "stop_strings"),
    "stop length": (CHAT, chat(stop="abcdef"), "stop", "stop_chars"),
    "input items": (RESPONSES, {"input": [{"role": "user", "content": "x"}] * 4}, "input", "messages"),
    "input text": (RESPONSES, {"input": "x" * 101}, "input", "message_chars"),
    "input item chars": (RESPONSES, {"input": [{"role": "user", "content": "x" * 101}]}, "input[0]",
                         "message_chars"),
    "instructions": (RESPONSES, {"input": "hi", "instructions": "x" * 101}, "instructions", "message_chars"),
    "depth": (CHAT, chat(metadata={"x": json.loads("[" * 9 + "]" * 9)}), "metadata.x", "depth"),
}


@pytest.mark.parametrize("route,body,param,limit", CASES.values(), ids=list(CASES))
def test_each_limit_is_a_400_naming_field_and_flag(small, route, body, param, limit):
    refused(small.post(route, json=body), param, limit)


def test_within_the_limits_is_served(small):
    ok = chat(messages=[{"role": "user", "content": "x" * 96}] * 3, stop=["abcde", "b"])
    assert small.post(CHAT, json=ok).status_code == 200
    assert small.post(RESPONSES, json={"input": "x" * 100, "max_output_tokens": 2}).status_code == 200


def test_body_size_is_a_413_before_reading(small):
    big = chat(metadata={"x": "y" * (64 * 1024)})
    refused(small.post(CHAT, json=big), None, "body_bytes", status=413)


def test_a_chunked_body_past_the_limit_is_a_413_while_it_streams(small):
    data = json.dumps(chat(metadata={"x": "y" * (256 * 1024)})).encode()
    def chunks():                      # no Content-Length: the server counts as it reads
        for i in range(0, len(data), 16 * 1024):
            yield data[i:i + 16 * 1024]

    r = small.post(CHAT, content=chunks(), headers={"Content-Type": "application/json"})
    refused(r, None, "body_bytes", status=413)
    assert r.headers["connection"] == "close"


def test_limits_parse_from_flags():
    assert Limits.parse(["messages=10", "grammar-seconds=2.5"]) == Limits(messages=10, grammar_seconds=2.5)
    for bad in ("messages", "nope=1", "messages=x", "messages=0", "depth=1.5"):
        with pytest.raises(ValueError):
            Limits.parse([bad])


def test_health_answers_while_a_large_body_is_prepared():
    """200,000 messages (7 MB) keep validation busy for seconds: /health answers meanwhile."""
    body = json.dumps({"messages": [{"role": "user", "content": "hello"}] * 200_000,
                       "max_tokens": 2}).encode()
    with running(FakeEngine(), api_config(limits=Limits(body_bytes=len(body) + 1, messages=10 ** 6))) as served:
        done = threading.Event()

        def send() -> None:
            with httpx.Client(base_url=served.url, timeout=120) as client:
                client.post(CHAT, content=body, headers={"Content-Type": "application/json"})
            done.set()

        sender = threading.Thread(target=send)
        sender.start()
        latencies = []
        with httpx.Client(base_url=served.url, timeout=30) as client:
            client.get("/health")
            while not done.is_set():
                start = time.perf_counter()
                assert client.get("/health").status_code == 200
                latencies.append(time.perf_counter() - start)
                time.sleep(0.01)
        sender.join()
    assert len(latencies) >= 5, "the request was too quick to measure /health under it"
    latencies.sort()
    # frozen, each would take seconds; the bound is loose for a busy machine
    assert latencies[len(latencies) // 2] < 0.25, latencies
