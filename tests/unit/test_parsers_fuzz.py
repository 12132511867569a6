"""Random replies built from each format's pieces: any chunking gives the whole
result, the event stream stays well formed, and a reply without calls keeps
all of its text as content."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfold.parsers import TOOL_PARSERS, collect, parser_for_template

from .test_parsers_common import (GEMMA4_TEMPLATE, GLM_TEMPLATE, QWEN25_TEMPLATE, QWEN35_TEMPLATE,
                                  assert_stream_matches, check_events, counter_ids, split, template_parser)

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "s": {"type": "string"}, "n": {"type": "integer"}, "a": {"type": "array"}, "b": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "g", "parameters": {}}}]

COMMON = ["x", " ", "\n", "\n\n", "<", ">", "/", "{", "}", "[", "]", '"', ":", ",", "\\", "é", "1", "true", "f", "g",
          "h", "s", "n"]
PIECES = {
    "qwen_xml": COMMON + ["<tool_call>", "</tool_call>", "<tool_", "<function=", "<function=f>", "<function=g>",
                          "<function=h>", "</function>", "<parameter=", "<parameter=s>", "<parameter=n>",
                          "<parameter=a>", "</parameter>", "</param", "[1]", "42"],
    "hermes": COMMON + ["<tool_call>", "</tool_call>", "<tool_call>\n", '{"name": "f", "arguments": {"s": 1}}',
                        '{"name": "g"}', '{"name": "h", "arguments": {}}', '"name"', '"arguments"', "null"],
    "gemma4": COMMON + ["<|tool_call>", "<tool_call|>", "call:", "call:f{", "call:g{}", "call:h{", '<|"|>',
                        "s:", "n:2", "a:[1,2]", "<|tool", "<|"],
    "glm": COMMON + ["<tool_call>", "</tool_call>", "<tool_call>f", "<tool_call>g\n", "<tool_call>h",
                     "<arg_key>", "</arg_key>", "<arg_key>s</arg_key>", "<arg_key>n</arg_key>", "<arg_value>",
                     "</arg_value>", "</arg_"],
    "json": COMMON + ["```", "```json\n", "\n```", '{"name": "f", "arguments": {"s": "v"}}',
                      '{"name": "g", "parameters": {}}', '{"name": "h", "arguments": {}}', '{"answer": 1}',
                      '"name"', '"arguments"', ", ", "[", "]"],
}

# Whole valid calls, so random replies often hold calls and near-calls too.
VALID = {
    "qwen_xml": ["<tool_call>\n<function=f>\n<parameter=s>\nhi there\n</parameter>\n<parameter=n>\n4\n"
                 "</parameter>\n<parameter=a>\n[1, 2]\n</parameter>\n</function>\n</tool_call>",
                 "<tool_call>\n<function=g>\n</function>\n</tool_call>"],
    "hermes": ['<tool_call>\n{"name": "f", "arguments": {"s": "v", "n": [1, {"x": "}"}]}}\n</tool_call>',
               '<tool_call>{"name": "g"}</tool_call>'],
    "gemma4": ['<|tool_call>call:f{s:<|"|>v, {x}<|"|>,n:2,a:[1,{k:true}]}<tool_call|>',
               "<|tool_call>call:g{}<tool_call|>"],
    "glm": ["<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>v v</arg_value>\n<arg_key>n</arg_key>\n"
            "<arg_value>3</arg_value>\n</tool_call>", "<tool_call>g</tool_call>"],
    "json": ['{"name": "f", "arguments": {"s": "v"}}', '```json\n[{"name": "g", "arguments": {}}]\n```',
             '\n{"name": "g", "parameters": {}}\n'],
}

SETTINGS = settings(max_examples=120, deadline=None)


@st.composite
def mutated(draw, name, extra=()):
    """A few valid calls and random pieces, then a few characters cut out or pieces put in."""
    pieces = PIECES[name] + list(extra)
    parts = draw(st.lists(st.one_of(st.sampled_from(VALID[name]),
                                    st.lists(st.sampled_from(pieces), max_size=4).map("".join)),
                          min_size=1, max_size=4))
    text = "".join(parts)
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text = text[:i] + text[i + draw(st.integers(1, 3)):]
        else:
            text = text[:i] + draw(st.sampled_from(pieces)) + text[i:]
    return text


def texts(name, extra=()):
    return st.one_of(st.lists(st.sampled_from(PIECES[name] + list(extra)), max_size=40).map("".join),
                     mutated(name, extra))


@pytest.mark.parametrize("name", sorted(TOOL_PARSERS))
@SETTINGS
@given(data=st.data())
def test_any_chunking_gives_the_whole_result(name, data):
    text = data.draw(texts(name))
    cuts = data.draw(st.lists(st.integers(0, max(len(text), 1)), max_size=20))
    reply = assert_stream_matches(TOOL_PARSERS[name], TOOLS, text, cuts)
    if not reply.calls:
        assert reply.content == text
    assert all(c.name in ("f", "g") for c in reply.calls)


@pytest.mark.parametrize("name", sorted(TOOL_PARSERS))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_first_call_only_any_chunking(name, data):
    text = data.draw(texts(name))
    cuts = data.draw(st.lists(st.integers(0, max(len(text), 1)), max_size=20))
    reply = assert_stream_matches(TOOL_PARSERS[name], TOOLS, text, cuts, parallel_tool_calls=False)
    everything = assert_stream_matches(TOOL_PARSERS[name], TOOLS, text)
    assert len(reply.calls) <= 1
    assert [(c.name, c.arguments) for c in reply.calls] == [(c.name, c.arguments) for c in everything.calls[:1]]


@pytest.mark.parametrize("template, prompt, extra", [
    (QWEN35_TEMPLATE, "<think>\n", ["</think>", "</thi", "<think>", "\n</think>\n\n"]),
    (QWEN25_TEMPLATE, "", ["<think>", "</think>", "</th"]),
    (GEMMA4_TEMPLATE, "", ["<|channel>thought\n", "<channel|>", "<chan"]),
    (GLM_TEMPLATE, "<think>", ["</think>", "<think>"]),
])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_reply_parser_any_chunking(template, prompt, extra, data):
    text = data.draw(texts(parser_for_template(template), extra))
    cuts = data.draw(st.lists(st.integers(0, max(len(text), 1)), max_size=20))
    whole = template_parser(template, TOOLS, prompt=prompt, new_id=counter_ids()).parse(text)
    for chunks in (list(text), split(text, cuts)):
        parser = template_parser(template, TOOLS, prompt=prompt, new_id=counter_ids())
        events = []
        for c in chunks:
            events += parser.feed(c)
        events += parser.end()
        check_events(events)
        assert collect(events) == whole


LONG = " " * 300
NAME = "n" * 300


@pytest.mark.parametrize("name, text", [
    ("qwen_xml", "<tool_call>" + LONG + "<function=g>\n</function>\n</tool_call>"),
    ("qwen_xml", "<tool_call>\n<function=g>\n</function>" + LONG + "</tool_call>"),
    ("qwen_xml", "<tool_call>\n<function=" + NAME + ">\n</function>\n</tool_call>"),
    ("qwen_xml", "<tool_call>\n<function=f>\n<parameter=" + NAME + ">\nv\n</parameter>\n</function>"),
    ("hermes", "<tool_call>" + LONG + '{"name": "g"}</tool_call>'),
    ("gemma4", "<|tool_call>" + LONG + "call:g{}<tool_call|>"),
    ("glm", "<tool_call>" + NAME + "</tool_call>"),
    ("glm", "<tool_call>" + "n" * 250 + "</tool_call>"),
    ("glm", "<tool_call>f<arg_key>" + NAME + "</arg_key><arg_value>1</arg_value></tool_call>"),
    ("glm", "<tool_call>f<arg_key>" + "k" * 250 + "</arg_key><arg_value>1</arg_value></tool_call>"),
    ("json", "```json" + LONG + "\n" + '{"name": "g", "arguments": {}}\n```'),
    ("json", "```json\n" + LONG + '{"name": "g", "arguments": {}}\n```'),
])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_held_text_limits_do_not_depend_on_chunking(name, text, data):
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=20))
    assert_stream_matches(TOOL_PARSERS[name], TOOLS, text, cuts)
