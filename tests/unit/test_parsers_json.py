"""Plain JSON calls (Qwen2.5-Coder style): bare, fenced or a list; only offered names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfold.parsers import ContentDelta, JsonCallParser

from .test_parsers_common import FAST, assert_stream_matches, calls_as_dicts, cuts_for

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
         for n in ("get_weather", "ping")]

W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
P = '{"name": "ping", "arguments": {}}'

CASES = [
    ("Plain prose answer.\nSecond line.", "Plain prose answer.\nSecond line.", []),
    (W, "", [("get_weather", {"city": "Paris"})]),
    ("  " + W + "  \n", "", [("get_weather", {"city": "Paris"})]),
    ("```json\n" + W + "\n```", "", [("get_weather", {"city": "Paris"})]),
    ("```\n" + P + "\n```\n", "", [("ping", {})]),
    ("[" + W + ", " + P + "]", "", [("get_weather", {"city": "Paris"}), ("ping", {})]),
    ("```json\n[\n  " + W + ",\n  " + P + "\n]\n```", "", [("get_weather", {"city": "Paris"}), ("ping", {})]),
    ("I will call the tool.\n" + W, "I will call the tool.", [("get_weather", {"city": "Paris"})]),
    (W + "\n" + P + "\nDone.", "Done.", [("get_weather", {"city": "Paris"}), ("ping", {})]),
    ('{"name": "ping", "parameters": {"x": [1, {"y": "}{"}]}}', "", [("ping", {"x": [1, {"y": "}{"}]})]),
    ('{"arguments": {"k": "v"}, "name": "ping"}', "", [("ping", {"k": "v"})]),
    ("```json\n" + W + "\n", "", [("get_weather", {"city": "Paris"})]),   # the reply ends before the fence
]

NOT_CALLS = [
    '{"answer": 42, "reason": "structured output"}',
    '{"name": "Alice", "age": 30}',                       # names no offered tool
    '{"name": "get_weather"}',                             # no arguments: not a call
    '{"name": "unknown", "arguments": {}}',
    "[" + W + ', {"name": "unknown", "arguments": {}}]',
    "[1, 2, 3]",
    "[]",
    "{}",
    "Here it is: " + W,                                    # not at a line start
    W + " and more text on the line",
    "[a markdown link](http://example.com)",
    "```python\nprint({'a': 1})\n```",
    "```json\n{\"answer\": true}\n```",
    '{"name": "get_weather", "arguments": {"city": "Par',  # cut short
    '{"name": "get_weather", "arguments": {"x": NaN}}',
    "{ not json at all }",
    "``",
    "`code`",
]


@pytest.mark.parametrize("text, content, calls", CASES)
def test_cases_whole_and_streamed(text, content, calls):
    reply = assert_stream_matches(JsonCallParser, TOOLS, text)
    assert reply.content == content
    assert calls_as_dicts(reply) == calls


@pytest.mark.parametrize("text", NOT_CALLS)
def test_non_calls_keep_their_text_as_content(text):
    reply = assert_stream_matches(JsonCallParser, TOOLS, text)
    assert reply.calls == [] and reply.content == text


@pytest.mark.parametrize("text", [c[0] for c in CASES] + NOT_CALLS)
@FAST
@given(data=st.data())
def test_random_chunkings(text, data):
    assert_stream_matches(JsonCallParser, TOOLS, text, data.draw(cuts_for(text)))


def test_structured_answer_is_released_as_soon_as_it_cannot_be_a_call():
    p = JsonCallParser(TOOLS)
    assert p.feed('{"answer": "a long structured') == [ContentDelta('{"answer": "a long structured')]
    p = JsonCallParser(TOOLS)
    assert p.feed('{"name": "Alice", "bio": "') == [ContentDelta('{"name": "Alice", "bio": "')]
    p = JsonCallParser(TOOLS)
    assert p.feed('{"name": "get_weather", "arguments": {"city": "Pa') == []


def test_parallel_tool_calls_false():
    reply = assert_stream_matches(JsonCallParser, TOOLS, "[" + W + ", " + P + "]", parallel_tool_calls=False)
    assert calls_as_dicts(reply) == [("get_weather", {"city": "Paris"})]
