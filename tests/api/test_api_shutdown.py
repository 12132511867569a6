"""Graceful shutdown (lifecycle.py) on the FakeEngine: a running stream ends with an error
event and [DONE] (Responses: response.failed), a request still being prepared and any
new one get a 503, and the server then closes."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest

from tests.api.api_helpers import assert_envelope
from tests.api.conftest import api_config
from tests.api.fake_engine import FakeEngine
from tensorfold.api import errors
from tensorfold.api.app import create_app
from tensorfold.api.lifecycle import SHUTDOWN, Drain
from tensorfold.api.server import ServerThread

SLOW = [{"role": "user", "content": "[[slow]] go on"}]


def _stop_after_first_event(stream: httpx.Response, thread: ServerThread) -> list[str]:
    """The stream's data lines; the server is stopped gracefully once the first arrives."""
    lines: list[str] = []
    stopper: threading.Thread | None = None
    for line in stream.iter_lines():
        if not line.startswith("data: "):
            continue
        lines.append(line[6:])
        if stopper is None and len(lines) >= 3:
            stopper = threading.Thread(target=thread.stop, kwargs={"graceful": True})
            stopper.start()
    assert stopper is not None
    stopper.join(10)
    assert not stopper.is_alive(), "the server did not stop"
    return lines


@pytest.mark.parametrize("route,body", [
    ("/v1/chat/completions", {"messages": SLOW, "max_tokens": 400, "stream": True}),
    ("/v1/completions", {"prompt": "[[slow]]", "max_tokens": 400, "stream": True}),
])
def test_a_running_stream_ends_with_an_error_event_and_done(route, body):
    thread = ServerThread(create_app(FakeEngine(), api_config()))
    url = thread.start()
    started = time.monotonic()
    with httpx.stream("POST", url + route, json=body, timeout=30) as stream:
        assert stream.status_code == 200
        lines = _stop_after_first_event(stream, thread)
    assert time.monotonic() - started < 6            # 400 slow tokens would take 8 s
    assert lines[-1] == "[DONE]"
    error = json.loads(lines[-2])["error"]
    assert error["type"] == errors.SERVER_ERROR and SHUTDOWN in error["message"]


def test_a_running_responses_stream_ends_with_response_failed():
    thread = ServerThread(create_app(FakeEngine(), api_config()))
    url = thread.start()
    body = {"input": SLOW, "max_output_tokens": 400, "stream": True}
    with httpx.stream("POST", url + "/v1/responses", json=body, timeout=30) as stream:
        assert stream.status_code == 200
        lines = _stop_after_first_event(stream, thread)
    last = json.loads(lines[-1])
    assert last["type"] == "response.failed"
    assert SHUTDOWN in last["response"]["error"]["message"]


def test_a_whole_reply_in_flight_gets_a_503():
    thread = ServerThread(create_app(FakeEngine(), api_config()))
    url = thread.start()
    replies: list[httpx.Response] = []
    sender = threading.Thread(target=lambda: replies.append(httpx.post(
        url + "/v1/chat/completions", json={"messages": SLOW, "max_tokens": 400}, timeout=30)))
    sender.start()
    time.sleep(0.3)
    thread.stop(graceful=True)
    sender.join(10)
    error = assert_envelope(replies[0], 503, type=errors.SERVER_ERROR)
    assert error["code"] == "server_shutting_down"


def test_drain_refuses_new_requests_and_cancels_those_being_prepared():
    async def scenario() -> None:
        engine = FakeEngine()
        drain = Drain(engine)
        waiting = asyncio.Event()

        async def preparing() -> None:
            await waiting.wait()            # a grammar compile, say

        task = asyncio.create_task(drain.run(preparing))
        await asyncio.sleep(0.01)
        await drain.begin(grace=1.0)
        with pytest.raises(errors.APIError) as refused:
            await task
        assert refused.value.status == 503
        assert engine.ended == SHUTDOWN
        with pytest.raises(errors.APIError) as late:
            await drain.run(preparing)
        assert late.value.status == 503

    asyncio.run(scenario())
