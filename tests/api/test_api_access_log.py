"""The serve log's access lines: one per request, with method, path, status,
time in ms, and the reply's token counts when it generated one."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tensorfold.api.edge import access_log
from tests.api.api_helpers import CHAT, HELLO
from tests.api.conftest import api_config
from tests.api.fake_engine import FakeEngine
from tests.servers import Served, running

LINE = re.compile(r"(?P<method>[A-Z]+) (?P<path>\S+) (?P<status>\d{3}|-) (?P<ms>\d+\.\d) ms"
                  r"(?: prompt_tokens=(?P<prompt>\d+) completion_tokens=(?P<reply>\d+))?(?P<gone> client gone)?")


@pytest.fixture(scope="module")
def logged() -> Iterator[Served]:
    """A server of its own, so every access line it writes is a test's."""
    with running(FakeEngine(), api_config()) as served:
        yield served


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture):
    """wait(n): the access lines so far, once there are n (a stream's line
    comes after its client has read [DONE])."""
    caplog.set_level(logging.INFO, logger=access_log.log.name)

    def wait(n: int) -> list[re.Match]:
        deadline = time.monotonic() + 10
        while True:
            found = [r.getMessage() for r in caplog.records if r.name == access_log.log.name]
            if len(found) >= n or time.monotonic() > deadline:
                assert len(found) == n, found
                return [LINE.fullmatch(line) or pytest.fail(f"not an access line: {line!r}") for line in found]
            time.sleep(0.01)
    return wait


@pytest.fixture
def client(logged: Served) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=logged.base_url, api_key="unused", max_retries=0, timeout=30) as c:
        yield c


def test_a_reply_logs_its_tokens(client, lines):
    reply = client.chat.completions.create(model="fake-model", messages=HELLO, max_tokens=16)
    [line] = lines(1)
    assert (line["method"], line["path"], line["status"]) == ("POST", CHAT, "200")
    assert int(line["prompt"]) == reply.usage.prompt_tokens
    assert int(line["reply"]) == reply.usage.completion_tokens
    assert float(line["ms"]) > 0 and not line["gone"]


def test_a_stream_logs_once_when_it_ends(client, lines):
    chunks = list(client.completions.create(model="fake-model", prompt="Once", max_tokens=8, stream=True))
    [line] = lines(1)
    assert (line["method"], line["path"], line["status"]) == ("POST", "/v1/completions", "200")
    assert int(line["reply"]) == chunks[-1].usage.completion_tokens
    assert not line["gone"]


def test_a_response_logs_its_tokens(client, lines):
    response = client.responses.create(model="fake-model", input="Hi", max_output_tokens=16, store=False)
    [line] = lines(1)
    assert line["path"] == "/v1/responses"
    assert (int(line["prompt"]), int(line["reply"])) == (response.usage.input_tokens, response.usage.output_tokens)


def test_other_routes_and_refusals_log_without_tokens(client, logged, lines):
    client.models.retrieve("fake-model")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=HELLO)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="fake-model", messages=HELLO, temperature="hot")
    httpx.get(f"{logged.url}/health?x=1")
    found = lines(4)
    assert [(m["method"], m["path"], m["status"]) for m in found] == [
        ("GET", "/v1/models/fake-model", "200"), ("POST", CHAT, "404"), ("POST", CHAT, "400"),
        ("GET", "/health", "200")]
    assert all(m["prompt"] is None and not m["gone"] for m in found)


def test_a_client_that_leaves_mid_stream_is_logged(logged, lines):
    body = {"messages": [{"role": "user", "content": "[[slow]]"}], "max_tokens": 200, "stream": True}
    with httpx.Client(base_url=logged.url, timeout=30) as http:
        with http.stream("POST", CHAT, json=body) as r:
            next(r.iter_lines())
    [line] = lines(1)
    assert (line["path"], line["status"], line["gone"]) == (CHAT, "200", " client gone")
