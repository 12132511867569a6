"""Hermes JSON-in-<tool_call> calls: whole == streamed, non-calls stay content."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfold.parsers import ContentDelta, HermesParser, ToolCallArgsDelta, ToolCallEnd, ToolCallStart

from .test_parsers_common import FAST, assert_stream_matches, calls_as_dicts, counter_ids, cuts_for

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
         for n in ("get_weather", "search", "ping")]


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


W = block('{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}')
S = block('{"name": "search", "arguments": {"q": "a \\"quoted\\" </tool_call> {brace}", "n": [1, 2.5, null]}}')

CASES = [
    ("Plain prose with {braces} and <tags>.", "Plain prose with {braces} and <tags>.", []),
    (W, "", [("get_weather", {"city": "Paris", "days": 3})]),
    ("I'll look it up.\n\n" + W, "I'll look it up.", [("get_weather", {"city": "Paris", "days": 3})]),
    (W + "\n" + S, "", [("get_weather", {"city": "Paris", "days": 3}),
                        ("search", {"q": 'a "quoted" </tool_call> {brace}', "n": [1, 2.5, None]})]),
    (W + "\nThat is all.", "That is all.", [("get_weather", {"city": "Paris", "days": 3})]),
    ('<tool_call>{"name":"ping"}</tool_call>', "", [("ping", {})]),
    (block('{"name": "ping", "parameters": {"x": 1}}'), "", [("ping", {"x": 1})]),
    (block('{"name": "ping", "arguments": "{\\"x\\": 1}"}'), "", [("ping", {"x": 1})]),
    (block('{"arguments": {"x": 1}, "name": "ping"}'), "", [("ping", {"x": 1})]),
    (block('{"name": "ping", "arguments": {"s": "ü 😀"}}'), "", [("ping", {"s": "ü 😀"})]),
    # the reply ends after a complete object without the closing tag
    ('<tool_call>\n{"name": "ping", "arguments": {}}\n', "", [("ping", {})]),
]

NOT_CALLS = [
    "Mentioning <tool_call> in prose.",
    block('{"name": "unknown_tool", "arguments": {}}'),
    block('{"name": "get_weather", "arguments": [1]}'),
    block('{"name": "get_weather", "arguments": {"city": }}'),
    block('{"name": 5, "arguments": {}}'),
    block('{"answer": 42}'),
    block('["get_weather"]'),
    block('{"name": "get_weather", "arguments": {"x": NaN}}'),
    block('{"name": "get_weather", "arguments": {}} trailing'),
    block("<function=get_weather>\n</function>"),
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
    "<tool_call>\n",
    "<tool_",
]


@pytest.mark.parametrize("text, content, calls", CASES)
def test_cases_whole_and_streamed(text, content, calls):
    reply = assert_stream_matches(HermesParser, TOOLS, text)
    assert reply.content == content
    assert calls_as_dicts(reply) == calls


@pytest.mark.parametrize("text", NOT_CALLS)
def test_non_calls_keep_their_text_as_content(text):
    reply = assert_stream_matches(HermesParser, TOOLS, text)
    assert reply.calls == [] and reply.content == text


@pytest.mark.parametrize("text", [c[0] for c in CASES] + NOT_CALLS)
@FAST
@given(data=st.data())
def test_random_chunkings(text, data):
    assert_stream_matches(HermesParser, TOOLS, text, data.draw(cuts_for(text)))


def test_call_goes_out_whole_at_the_closing_tag():
    p = HermesParser(TOOLS, new_id=counter_ids())
    assert p.feed('Ok <tool_call>\n{"name": "ping", "arguments": {"a"') == [ContentDelta("Ok")]
    assert p.feed(": 1}}\n</tool_") == []
    assert p.feed("call>") == [ToolCallStart(0, "call_0", "ping"), ToolCallArgsDelta(0, '{"a": 1}'),
                               ToolCallEnd(0)]


def test_unoffered_name_is_released_early():
    p = HermesParser(TOOLS)
    events = p.feed('<tool_call>\n{"name": "nope", "arguments": {"long": "')
    assert "".join(e.text for e in events) == '<tool_call>\n{"name": "nope", "arguments": {"long": "'


def test_parallel_tool_calls_false():
    reply = assert_stream_matches(HermesParser, TOOLS, W + S + "bye", parallel_tool_calls=False)
    assert calls_as_dicts(reply) == [("get_weather", {"city": "Paris", "days": 3})]
    assert reply.content == "bye"
