"""Assertions shared by the API tests."""

from __future__ import annotations

import json
from typing import Any

import httpx

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
HELLO = [{"role": "user", "content": "Say hello."}]


def sse_events(response: httpx.Response) -> list[Any]:
    """The `data:` payloads of an SSE body: parsed JSON, and "[DONE]" as is."""
    events = []
    for block in response.text.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def assert_envelope(response: httpx.Response, status: int, param: str | None = None,
                    type: str = "invalid_request_error") -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == type
    assert error["param"] == param, error
    return error
