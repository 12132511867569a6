"""Qwen XML tool calls: whole == streamed, schema typing, non-calls stay content."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfold.parsers import (ContentDelta, QwenXmlParser, ToolCallArgsDelta, ToolCallEnd, ToolCallStart,
                                convert)

from .test_parsers_common import (FAST, assert_stream_matches, calls_as_dicts, counter_ids, cuts_for,
                                  run_stream)

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "units": {"type": "array", "items": {"type": "string"}},
        "verbose": {"type": "boolean"},
        "ratio": {"type": "number"},
        "extra": {"type": "object"},
        "nothing": {"type": "null"},
        "untyped": {"description": "no type"},
        "either": {"type": ["integer", "null"]},
        "ref": {"$ref": "#/$defs/Thing"},
        "any_of": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
    }}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "content": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}},
]


def call(name, *params):
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


CODE = "\n\n    def f(x):\n        return x  # </param <tool\n\n\t"
WEATHER = call("get_weather", ("city", "Paris"), ("days", "3"))

# (reply, expected content, expected calls as (name, arguments))
CASES = [
    ("Just prose, no call. a < b and <b>bold</b>.", "Just prose, no call. a < b and <b>bold</b>.", []),
    (WEATHER, "", [("get_weather", {"city": "Paris", "days": 3})]),
    ("Let me check.\n\n" + WEATHER, "Let me check.", [("get_weather", {"city": "Paris", "days": 3})]),
    (WEATHER + "\n" + call("ping"), "", [("get_weather", {"city": "Paris", "days": 3}), ("ping", {})]),
    (WEATHER + "\n\nIt is sunny.", "It is sunny.", [("get_weather", {"city": "Paris", "days": 3})]),
    ("Before. " + WEATHER + "\n\nAfter.", "Before.\n\nAfter.", [("get_weather", {"city": "Paris", "days": 3})]),
    (call("write_file", ("path", "a.py"), ("content", CODE)), "",
     [("write_file", {"path": "a.py", "content": CODE})]),
    (call("write_file", ("path", ' "q" \\ é 😀 \u2028'), ("content", "")), "",
     [("write_file", {"path": ' "q" \\ é 😀 \u2028', "content": ""})]),
    # every type of the table, streamed and whole
    (call("get_weather", ("units", '["c", "f"]'), ("verbose", "true"), ("ratio", "0.5"),
          ("extra", '{"a": [1, {"b": null}]}'), ("nothing", "null"), ("untyped", "42")), "",
     [("get_weather", {"units": ["c", "f"], "verbose": True, "ratio": 0.5, "extra": {"a": [1, {"b": None}]},
                       "nothing": None, "untyped": "42"})]),
    # mismatched values stay strings
    (call("get_weather", ("days", "three"), ("units", "c, f"), ("verbose", "yes")), "",
     [("get_weather", {"days": "three", "units": "c, f", "verbose": "yes"})]),
    # a repeated parameter keeps its first value
    (call("get_weather", ("city", "A"), ("city", "B")), "", [("get_weather", {"city": "A"})]),
    # no </parameter>: the value ends at the next marker
    ("<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n<parameter=days>\n2\n</function>\n</tool_call>",
     "", [("get_weather", {"city": "Rome", "days": 2})]),
    # two functions in one block; stray text between parameters is ignored
    ("<tool_call>\n<function=ping>\n</function>\n<function=get_weather>\nnoise<parameter=city>\nX\n</parameter>"
     "\n</function>\n</tool_call>", "", [("ping", {}), ("get_weather", {"city": "X"})]),
    # compact, no newlines at all
    ("<tool_call><function=get_weather><parameter=city>Oslo</parameter></function></tool_call>", "",
     [("get_weather", {"city": "Oslo"})]),
    # a reply cut inside a value still ends the call with what it had
    ("<tool_call>\n<function=write_file>\n<parameter=content>\nhalf a fi", "",
     [("write_file", {"content": "half a fi"})]),
    ("<tool_call>\n<function=get_weather>\n<parameter=days>\n12\n</param", "", [("get_weather", {"days": 12})]),
    ("<tool_call>\n<function=get_weather>\n", "", [("get_weather", {})]),
]

NOT_CALLS = [
    "Use a <tool_call> tag to call things.",
    "<tool_call>\n<function=launch_missiles>\n<parameter=target>\nx\n</parameter>\n</function>\n</tool_call>",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "<tool_call>\n<function=get_weather",
    "<tool_call>\n<function=get weather\n>",
    "<tool_call>",
    "<tool_call>\n",
    "<tool_call",
    "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
]


@pytest.mark.parametrize("text, content, calls", CASES)
def test_cases_whole_and_streamed(text, content, calls):
    reply = assert_stream_matches(QwenXmlParser, TOOLS, text)
    assert reply.content == content
    assert calls_as_dicts(reply) == calls
    assert [c.id for c in reply.calls] == [f"call_{i}" for i in range(len(calls))]


@pytest.mark.parametrize("text", NOT_CALLS)
def test_non_calls_keep_their_text_as_content(text):
    reply = assert_stream_matches(QwenXmlParser, TOOLS, text)
    assert reply.calls == []
    assert reply.content == text


@pytest.mark.parametrize("case", range(len(CASES)))
@FAST
@given(data=st.data())
def test_random_chunkings(case, data):
    text = CASES[case][0]
    assert_stream_matches(QwenXmlParser, TOOLS, text, data.draw(cuts_for(text)))


@pytest.mark.parametrize("text", NOT_CALLS)
@FAST
@given(data=st.data())
def test_random_chunkings_of_non_calls(text, data):
    assert_stream_matches(QwenXmlParser, TOOLS, text, data.draw(cuts_for(text)))


def test_name_streams_first_then_argument_fragments():
    p = QwenXmlParser(TOOLS, new_id=counter_ids())
    assert p.feed("Checking.\n<tool_call>\n<function=write_") == [ContentDelta("Checking.")]
    assert p.feed("file>\n") == [ToolCallStart(0, "call_0", "write_file")]
    assert p.feed("<parameter=content>\nline one\n") == [ToolCallArgsDelta(0, '{"content": "line one')]
    assert p.feed("line two\n") == [ToolCallArgsDelta(0, "\\nline two")]
    assert p.feed("</parameter>\n<parameter=path>\nx") == [ToolCallArgsDelta(0, '", "path": "x')]
    assert p.feed("\n</parameter>\n</function>") == [ToolCallArgsDelta(0, '"}'), ToolCallEnd(0)]
    assert p.feed("\n</tool_call>") == []
    assert p.end() == []


def test_typed_value_goes_out_when_it_ends():
    p = QwenXmlParser(TOOLS, new_id=counter_ids())
    p.feed("<tool_call>\n<function=get_weather>\n")
    assert p.feed("<parameter=days>\n1") == []
    assert p.feed("4\n</parameter>") == [ToolCallArgsDelta(0, '{"days": 14')]


def test_held_text_is_only_a_possible_marker():
    p = QwenXmlParser(TOOLS)
    assert p.feed("a <tool") == [ContentDelta("a")]        # " " waits with the marker it may touch
    assert p.feed("box> b") == [ContentDelta(" <toolbox> b")]
    assert p.end() == []


def test_whitespace_only_reply_and_empty_reply():
    for text in ["", "   ", "\n\n"]:
        reply = assert_stream_matches(QwenXmlParser, TOOLS, text)
        assert reply.content == text and reply.calls == []


def test_parallel_tool_calls_false_keeps_first_call():
    text = "Sure.\n" + WEATHER + "\n" + call("ping") + "\nDone."
    reply = assert_stream_matches(QwenXmlParser, TOOLS, text, parallel_tool_calls=False)
    assert calls_as_dicts(reply) == [("get_weather", {"city": "Paris", "days": 3})]
    assert reply.content == "Sure.\nDone."
    p = QwenXmlParser(TOOLS, new_id=counter_ids(), parallel_tool_calls=False)
    events = p.feed("Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPa")
    assert events == [ContentDelta("Sure.")]                # prose streams, the call waits
    assert p.feed("ris\n</parameter>\n") == []
    events = p.feed("</function>")
    assert [type(e) for e in events] == [ToolCallStart, ToolCallArgsDelta, ToolCallEnd]


def test_no_tools_offered_means_no_calls():
    reply = assert_stream_matches(QwenXmlParser, None, WEATHER)
    assert reply.calls == [] and reply.content == WEATHER


# -- the schema typing table --------------------------------------------------

@pytest.mark.parametrize("type_, text, expected", [
    ("integer", "3", 3),
    ("integer", " -12 \n", -12),
    ("integer", "007", 7),
    ("integer", "3.0", "3.0"),
    ("integer", "1e3", "1e3"),
    ("integer", "three", "three"),
    ("integer", "", ""),
    ("number", "2.5", 2.5),
    ("number", "-1e-3", -0.001),
    ("number", "4", 4),
    ("number", "NaN", "NaN"),
    ("number", "1e999", "1e999"),
    ("number", ".5", ".5"),
    ("boolean", "true", True),
    ("boolean", "False", False),
    ("boolean", " TRUE ", True),
    ("boolean", "yes", "yes"),
    ("boolean", "1", "1"),
    ("null", "null", None),
    ("null", "None", None),
    ("null", "nil", "nil"),
    ("array", '[1, "a", {"b": false}]', [1, "a", {"b": False}]),
    ("array", "\n[]\n", []),
    ("array", '{"a": 1}', '{"a": 1}'),
    ("array", "['a']", "['a']"),
    ("array", "[1, 2", "[1, 2"),
    ("array", "[NaN]", "[NaN]"),
    ("object", '{"a": {"b": [1]}}', {"a": {"b": [1]}}),
    ("object", "[1]", "[1]"),
    ("object", "{'a': 1}", "{'a': 1}"),
    (None, "  spaced  \n", "  spaced  \n"),
])
def test_conversion_table(type_, text, expected):
    got = convert(text, type_)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("param, written, expected", [
    ("city", "  two spaces  ", "  two spaces  "),
    ("city", "\nblank line before", "\nblank line before"),
    ("city", "trailing blank\n", "trailing blank\n"),
    ("city", "", ""),
    ("city", "42", "42"),
    ("days", " 42 ", 42),
    ("days", "forty", "forty"),
    ("ratio", "1.25", 1.25),
    ("verbose", "False", False),
    ("units", '["a"]', ["a"]),
    ("units", "a, b", "a, b"),
    ("extra", '{"k": "v"}', {"k": "v"}),
    ("nothing", "null", None),
    ("either", "5", "5"),          # union types are not resolved
    ("ref", "{}", "{}"),           # nor $ref
    ("any_of", "5", "5"),
    ("unknown_param", "5", "5"),
])
def test_values_typed_by_schema_streamed_and_whole(param, written, expected):
    text = call("get_weather", (param, written))
    reply = assert_stream_matches(QwenXmlParser, TOOLS, text)
    args = json.loads(reply.calls[0].arguments)
    assert args == {param: expected} and type(args[param]) is type(expected)


def test_template_newlines_round_trip():
    """The template writes '<parameter=K>\\n' + value + '\\n</parameter>': one
    newline each side is dropped, whatever the value holds."""
    for value in ["x", "\nx\n", "\n\n", " ", "a\n\nb", "\r\n"]:
        reply = run_stream(QwenXmlParser(TOOLS), [call("write_file", ("content", value))])
        assert json.loads(reply.calls[0].arguments) == {"content": value}
