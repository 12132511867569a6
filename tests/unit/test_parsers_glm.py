"""GLM <tool_call>NAME<arg_key>..</arg_key><arg_value>..</arg_value> calls: whole == streamed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfold.parsers import ContentDelta, GlmParser, ToolCallArgsDelta, ToolCallEnd, ToolCallStart

from .test_parsers_common import FAST, assert_stream_matches, calls_as_dicts, counter_ids, cuts_for

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"},
    "flag": {"type": "boolean"}, "tags": {"type": "array"}}}}},
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}]


def nl_call(name, *args):        # GLM-4.5 / 4.6 layout
    body = "".join(f"\n<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>" for k, v in args)
    return f"<tool_call>{name}{body}\n</tool_call>"


def inline_call(name, *args):    # GLM-4.7 / 5 layout
    body = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in args)
    return f"<tool_call>{name}{body}</tool_call>"


W_ARGS = (("city", "Paris"), ("days", "3"), ("opts", '{"mode": "fast"}'), ("flag", "true"), ("tags", '["a"]'))
W_EXPECTED = ("get_weather", {"city": "Paris", "days": 3, "opts": {"mode": "fast"}, "flag": True, "tags": ["a"]})

CASES = [
    ("Prose with <arg_key>x</arg_key> but no call.", "Prose with <arg_key>x</arg_key> but no call.", []),
    (nl_call("get_weather", *W_ARGS), "", [W_EXPECTED]),
    (inline_call("get_weather", *W_ARGS), "", [W_EXPECTED]),
    ("Checking.\n" + nl_call("get_weather", ("city", "Rome")) + "\n" + inline_call("ping"), "Checking.",
     [("get_weather", {"city": "Rome"}), ("ping", {})]),
    (nl_call("ping") + "\nDone.", "Done.", [("ping", {})]),
    # string values are kept exactly, whitespace and newlines included
    (nl_call("get_weather", ("city", "\n  New\nYork  \n")), "", [("get_weather", {"city": "\n  New\nYork  \n"})]),
    (nl_call("get_weather", ("days", "many"), ("unknown", "5")), "",
     [("get_weather", {"days": "many", "unknown": "5"})]),
    (nl_call("get_weather", ("city", "A"), ("city", "B")), "", [("get_weather", {"city": "A"})]),
    # missing </arg_value>, a key without a value
    ("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo<arg_key>days</arg_key><arg_value>2</tool_call>",
     "", [("get_weather", {"city": "Oslo", "days": 2})]),
    ("<tool_call>get_weather<arg_key>city</arg_key><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>",
     "", [("get_weather", {"days": 2})]),
    ("<tool_call>\nget_weather\n<arg_key>city</arg_key>\n<arg_value>X</arg_value>\n</tool_call>", "",
     [("get_weather", {"city": "X"})]),
    # cut short
    ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Ber", "", [("get_weather", {"city": "Ber"})]),
    ("<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>7</arg_va", "", [("get_weather", {"days": 7})]),
    ("<tool_call>ping\n<arg_key>ci", "", [("ping", {})]),
]

NOT_CALLS = [
    "Mentioning <tool_call> in prose.",
    nl_call("unknown_tool", ("a", "1")),
    '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>',
    "<tool_call>get_weather",
    "<tool_call>",
    "<tool_cal",
]


@pytest.mark.parametrize("text, content, calls", CASES)
def test_cases_whole_and_streamed(text, content, calls):
    reply = assert_stream_matches(GlmParser, TOOLS, text)
    assert reply.content == content
    assert calls_as_dicts(reply) == calls


@pytest.mark.parametrize("text", NOT_CALLS)
def test_non_calls_keep_their_text_as_content(text):
    reply = assert_stream_matches(GlmParser, TOOLS, text)
    assert reply.calls == [] and reply.content == text


@pytest.mark.parametrize("text", [c[0] for c in CASES] + NOT_CALLS)
@FAST
@given(data=st.data())
def test_random_chunkings(text, data):
    assert_stream_matches(GlmParser, TOOLS, text, data.draw(cuts_for(text)))


def test_name_then_streamed_string_value():
    p = GlmParser(TOOLS, new_id=counter_ids())
    assert p.feed("Sure <tool_call>get_wea") == [ContentDelta("Sure")]
    assert p.feed("ther\n<arg_key>ci") == [ToolCallStart(0, "call_0", "get_weather")]
    assert p.feed("ty</arg_key>\n<arg_value>Par") == [ToolCallArgsDelta(0, '{"city": "Par')]
    assert p.feed("is</arg_value></tool_call>") == [ToolCallArgsDelta(0, 'is"}'), ToolCallEnd(0)]
