"""The real default model, served on a real port and asked a real question."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_capital_of_france(default_server):
    reply = default_server.client.chat.completions.create(
        model=default_server.model,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0,
        max_tokens=32,
    )
    assert "Paris" in reply.choices[0].message.content
    assert reply.usage.completion_tokens > 0


def test_capital_of_france_streamed(default_server):
    stream = default_server.client.chat.completions.create(
        model=default_server.model,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0,
        max_tokens=32,
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
