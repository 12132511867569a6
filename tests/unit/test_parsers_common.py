"""Shared helpers for the parser tests, and tests of the shared parts
(event types, collect/coalesce, first_call_only, template detection, schemas).

Every parser test compares a reply parsed whole with the same reply streamed
in several chunkings: character by character and at hypothesis-drawn cuts.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tensorfold.parsers import (REASONING_MARKERS, TOOL_PARSERS, ContentDelta, FirstCallOnly, ReasoningDelta, Reply,
                                ToolCall, ToolCallArgsDelta, ToolCallEnd, ToolCallStart, build_reply_parser, coalesce,
                                collect, first_call_only, new_call_id, parser_for_template, reasoning_for_template,
                                starts_in_reasoning, tool_schemas)

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def template_parser(template, tools=None, *, prompt="", thinking=True, tool_format=None, reasoning_format=None,
                    **kwargs):
    """build_reply_parser with the formats read from `template` (as the server's ChatFormat
    reads them), thinking unless `thinking` is False, starting inside a think block the
    rendered `prompt` opened."""
    name = (reasoning_format or reasoning_for_template(template)) if thinking else None
    inside = name is not None and starts_in_reasoning(prompt, REASONING_MARKERS[name][0])
    return build_reply_parser(tools, tool_format=tool_format or parser_for_template(template),
                              reasoning_format=name, starts_inside=inside, **kwargs)


def counter_ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def check_events(events) -> None:
    """Structural rules every parser's event stream keeps."""
    open_index = None
    next_index = 0
    for e in events:
        if isinstance(e, (ContentDelta, ReasoningDelta, ToolCallArgsDelta)):
            assert e.text, f"empty delta {e!r}"
        if isinstance(e, ToolCallStart):
            assert open_index is None, "calls interleave"
            assert e.index == next_index
            assert e.id and e.name
            open_index = e.index
            next_index += 1
        elif isinstance(e, ToolCallArgsDelta):
            assert e.index == open_index
        elif isinstance(e, ToolCallEnd):
            assert e.index == open_index
            open_index = None
        else:
            assert open_index is None, "text inside a call"
    assert open_index is None, "a call never ended"
    for call in collect(events).calls:
        assert isinstance(json.loads(call.arguments), dict)


def run_stream(parser, chunks) -> Reply:
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.end()
    check_events(events)
    return collect(events)


def split(text: str, cuts) -> list[str]:
    points = sorted({c for c in cuts if 0 < c < len(text)})
    return [text[a:b] for a, b in zip([0] + points, points + [len(text)])]


def cuts_for(text: str):
    return st.lists(st.integers(0, max(len(text), 1)), max_size=12)


def whole_reply(cls, tools, text, **kw) -> Reply:
    content, calls = cls(tools, new_id=counter_ids(), **kw).parse(text)
    return Reply(content, "", calls)


def assert_stream_matches(cls, tools, text, cuts=None, **kw) -> Reply:
    """Whole == char-by-char == one chunk (== the given cuts); returns whole."""
    expected = whole_reply(cls, tools, text, **kw)
    for chunks in ([text], list(text), split(text, cuts or [])):
        got = run_stream(cls(tools, new_id=counter_ids(), **kw), chunks)
        assert got == expected, f"chunks {chunks!r}"
    return expected


def calls_as_dicts(reply: Reply) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in reply.calls]


# -- shared parts -----------------------------------------------------------

def test_collect_and_coalesce():
    events = [ContentDelta("a"), ContentDelta("b"), ContentDelta(""), ReasoningDelta("r"), ReasoningDelta("s"),
              ToolCallStart(0, "call_x", "f"), ToolCallArgsDelta(0, "{"), ToolCallArgsDelta(0, "}"),
              ToolCallEnd(0)]
    merged = coalesce(events)
    assert merged == [ContentDelta("ab"), ReasoningDelta("rs"), ToolCallStart(0, "call_x", "f"),
                      ToolCallArgsDelta(0, "{}"), ToolCallEnd(0)]
    assert collect(events) == Reply("ab", "rs", [ToolCall("call_x", "f", "{}")])


def test_new_call_id_shape():
    ids = {new_call_id() for _ in range(50)}
    assert len(ids) == 50
    for i in ids:
        assert i.startswith("call_") and len(i) == 29 and i[5:].isalnum()


def _call(index, name, args):
    return [ToolCallStart(index, f"call_{index}", name), ToolCallArgsDelta(index, args), ToolCallEnd(index)]


def test_first_call_only_keeps_first_completed_call():
    events = [ContentDelta("hi")] + _call(0, "a", "{}") + [ContentDelta(" there")] + _call(1, "b", "{}")
    assert first_call_only(events) == [ContentDelta("hi")] + _call(0, "a", "{}") + [ContentDelta(" there")]


def test_first_call_only_streaming_holds_the_call_until_it_ends():
    f = FirstCallOnly()
    assert f.filter([ContentDelta("x"), ToolCallStart(0, "call_0", "a"), ToolCallArgsDelta(0, '{"k": ')]) == \
        [ContentDelta("x")]
    assert f.filter([ReasoningDelta("r"), ToolCallArgsDelta(0, "1}")]) == [ReasoningDelta("r")]
    assert f.filter([ToolCallEnd(0)]) == [ToolCallStart(0, "call_0", "a"), ToolCallArgsDelta(0, '{"k": 1}'),
                                          ToolCallEnd(0)]
    assert f.filter(_call(1, "b", "{}") + [ContentDelta("y")]) == [ContentDelta("y")]


QWEN35_TEMPLATE = ("{%- if tools %}<tools>{{ tools }}</tools> ... <tool_call>\n<function=example_function_name>\n"
                   "<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n</tool_call>{% endif %}"
                   "{{- '<think>\\n' }}")
QWEN25_TEMPLATE = ('{%- if tools %}<tools>...</tools> For each function call, return a json object within '
                   '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
                   '<args-json-object>}\n</tool_call>{% endif %}')
GEMMA4_TEMPLATE = ("{%- if tools %}<|tool>declaration:...<tool|>{% endif %}{{ '<|tool_call>call:' + name + '{' }}"
                   "<|channel>thought\n<channel|>")
GLM_TEMPLATE = ("<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
                "{{ '<think></think>' if not enable_thinking else '<think>' }}")
PLAIN_TOOLS_TEMPLATE = "{% if tools %}You can call these functions: {{ tools | tojson }}{% endif %}"
SMOL_TEMPLATE = "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}{% endfor %}"


@pytest.mark.parametrize("template, tool, reasoning", [
    (QWEN35_TEMPLATE, "qwen_xml", "think"),
    (QWEN25_TEMPLATE, "hermes", None),
    (GEMMA4_TEMPLATE, "gemma4", "gemma4"),
    (GLM_TEMPLATE, "glm", "think"),
    (PLAIN_TOOLS_TEMPLATE, "json", None),
    (SMOL_TEMPLATE, None, None),
    ("", None, None),
])
def test_template_detection(template, tool, reasoning):
    assert parser_for_template(template) == tool
    assert reasoning_for_template(template) == reasoning
    if tool:
        assert tool in TOOL_PARSERS


def test_tool_schemas_accepts_every_shape():
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    openai = [{"type": "function", "function": {"name": "f", "parameters": schema}}, {"type": "function"}]
    assert tool_schemas(openai) == {"f": schema}
    assert tool_schemas([{"name": "f", "parameters": schema}, {"name": "g"}]) == {"f": schema, "g": {}}
    assert tool_schemas({"f": schema}) == {"f": schema}
    assert tool_schemas(None) == {}


def test_default_ids_are_random_call_ids():
    cls = TOOL_PARSERS["hermes"]
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call>' * 2
    _, calls = cls({"f": {}}).parse(text)
    assert len(calls) == 2 and calls[0].id != calls[1].id
    assert all(c.id.startswith("call_") for c in calls)


@pytest.mark.parametrize("cut", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
    '<tool_call>\n{"name": "get_weather", "arguments": ',
])
def test_a_forced_hermes_call_cut_off_still_calls_with_its_arguments_so_far(cut):
    cls = TOOL_PARSERS["hermes"]
    tools = {"get_weather": {}}
    content, calls = cls(tools, forced=True).parse(cut)
    assert content == "" and [(c.name, c.arguments) for c in calls] == [("get_weather", cut.split('"arguments": ')[1])]
    streamed = cls(tools, forced=True)
    events = [e for ch in cut for e in streamed.feed(ch)] + streamed.end()
    assert [(c.name, c.arguments) for c in collect(events).calls] == [(c.name, c.arguments) for c in calls]
    assert cls(tools).parse(cut) == (cut, [])              # not forced: answer text, as before


def test_a_forced_hermes_call_cut_off_in_its_name():
    cls = TOOL_PARSERS["hermes"]
    two = {"get_weather": {}, "get_time": {}}
    named = lambda text, tools: [c.name for c in cls(tools, forced=True).parse(text)[1]]  # noqa: E731
    assert named('<tool_call>\n{"name": "get_w', two) == ["get_weather"]        # the one offered name it fits
    assert named('<tool_call>\n{"name": "get_time", ', {**two, "get_time_utc": {}}) == ["get_time"]  # closed
    assert cls(two, forced=True).parse('<tool_call>\n{"name": "get_') == ("", [])  # either: no call, no markup
    assert named('<tool_call>\n{', {"get_weather": {}}) == ["get_weather"]
    text = '<tool_call>\n{"name": "nope", "arguments": {"a'       # not offered (no grammar held it): text
    assert cls(two, forced=True).parse(text) == (text, [])
