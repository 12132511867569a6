"""Reasoning and tool calls together, wired from a chat template as the server does."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfold.parsers import (ContentDelta, GlmParser, HermesParser, QwenXmlParser, ReasoningDelta,
                                ReasoningParser, Reply, ReplyParser, ToolCallEnd, ToolCallStart, collect)

from .test_parsers_common import (FAST, GEMMA4_TEMPLATE, GLM_TEMPLATE, QWEN25_TEMPLATE, QWEN35_TEMPLATE,
                                  SMOL_TEMPLATE, check_events, counter_ids, cuts_for, split, template_parser)

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}]

QWEN_PROMPT = "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\n"
XML_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n"
            "</parameter>\n</function>\n</tool_call>")
XML_PING = "<tool_call>\n<function=ping>\n</function>\n</tool_call>"
WEATHER = ("get_weather", {"city": "Paris", "days": 2})

# (template, prompt, extra kwargs, reply, expected reasoning, content, calls)
CASES = [
    (QWEN35_TEMPLATE, QWEN_PROMPT, {}, "The user wants weather.\n</think>\n\nLet me check.\n" + XML_CALL,
     "The user wants weather.", "Let me check.", [WEATHER]),
    # the call is written before the block closes and the reply ends inside it
    (QWEN35_TEMPLATE, QWEN_PROMPT, {}, "I need the weather.\n" + XML_CALL, "I need the weather.", "", [WEATHER]),
    (QWEN35_TEMPLATE, QWEN_PROMPT, {}, "I need the weather.\n" + XML_CALL + "\n" + XML_PING,
     "I need the weather.", "", [WEATHER, ("ping", {})]),
    # a call mentioned while thinking, the block closed after it: reasoning, not a call
    (QWEN35_TEMPLATE, QWEN_PROMPT, {}, "I could write " + XML_CALL + " but won't.\n</think>\n\nIt is sunny.",
     "I could write " + XML_CALL + " but won't.", "It is sunny.", []),
    (QWEN35_TEMPLATE, QWEN_PROMPT, {}, "Hmm " + XML_CALL + "\n</think>\n\n" + XML_PING,
     "Hmm " + XML_CALL, "", [("ping", {})]),
    # thinking off: the prompt closed the block, the reply is all answer
    (QWEN35_TEMPLATE, QWEN_PROMPT + "\n</think>\n\n", {}, "Sure.\n" + XML_CALL, "", "Sure.", [WEATHER]),
    (QWEN35_TEMPLATE, QWEN_PROMPT, {"thinking": False}, "<think>x</think>y", "", "<think>x</think>y", []),
    # no tools offered: no tool parser, markup stays content
    (QWEN35_TEMPLATE, QWEN_PROMPT, {"tools": None}, "r</think>" + XML_CALL, "r", XML_CALL, []),
    (QWEN25_TEMPLATE, "", {}, 'Sure.\n<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>',
     "", "Sure.", [("ping", {})]),
    (GEMMA4_TEMPLATE, "", {}, '<|channel>thought\nPlan.<channel|>On it.<|tool_call>call:get_weather{city:<|"|>Paris'
     '<|"|>,days:2}<tool_call|>', "Plan.", "On it.", [WEATHER]),
    (GEMMA4_TEMPLATE, "", {}, "<|channel>thought\nPlan.\n<|tool_call>call:ping{}<tool_call|>", "Plan.", "",
     [("ping", {})]),
    (GLM_TEMPLATE, "<|assistant|><think>", {}, "Weather needed.</think>\n<tool_call>get_weather<arg_key>city"
     "</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>",
     "Weather needed.", "", [WEATHER]),
    (SMOL_TEMPLATE, "", {}, "Hello <think> there " + XML_CALL, "", "Hello <think> there " + XML_CALL, []),
]


def build(template, prompt, kwargs):
    kwargs = dict(kwargs)
    tools = kwargs.pop("tools", TOOLS)
    return template_parser(template, tools, prompt=prompt, new_id=counter_ids(), **kwargs)


def stream(parser: ReplyParser, chunks) -> Reply:
    events = []
    for c in chunks:
        events += parser.feed(c)
    events += parser.end()
    check_events(events)
    return collect(events)


@pytest.mark.parametrize("template, prompt, kwargs, text, reasoning, content, calls", CASES)
def test_cases_whole_and_streamed(template, prompt, kwargs, text, reasoning, content, calls):
    whole = build(template, prompt, kwargs).parse(text)
    assert whole.reasoning == reasoning
    assert whole.content == content
    assert [(c.name, json.loads(c.arguments)) for c in whole.calls] == calls
    assert stream(build(template, prompt, kwargs), [text]) == whole
    assert stream(build(template, prompt, kwargs), list(text)) == whole


@pytest.mark.parametrize("case", range(len(CASES)))
@FAST
@given(data=st.data())
def test_random_chunkings(case, data):
    template, prompt, kwargs, text = CASES[case][:4]
    whole = build(template, prompt, kwargs).parse(text)
    assert stream(build(template, prompt, kwargs), split(text, data.draw(cuts_for(text)))) == whole


def test_unclosed_block_call_streams_no_markup_as_reasoning():
    parser = build(QWEN35_TEMPLATE, QWEN_PROMPT, {})
    events = []
    for ch in "I need the weather.\n" + XML_CALL:
        events += parser.feed(ch)
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "I need the weather."
    assert not [e for e in events if not isinstance(e, ReasoningDelta)]
    tail = parser.end()
    assert [type(e) for e in tail][0] is ToolCallStart and type(tail[-1]) is ToolCallEnd


def test_parallel_tool_calls_false_streams_prose_and_reasoning_then_one_call():
    parser = build(QWEN35_TEMPLATE, QWEN_PROMPT, {"parallel_tool_calls": False})
    assert parser.feed("Thinking.\n</think>\n\n") == [ReasoningDelta("Thinking.")]
    assert parser.feed("Checking.\n" + XML_CALL[:60]) == [ContentDelta("Checking.")]
    events = parser.feed(XML_CALL[60:] + "\n" + XML_PING)
    assert [type(e) for e in events][0] is ToolCallStart and type(events[-1]) is ToolCallEnd
    assert parser.end() == []
    whole = build(QWEN35_TEMPLATE, QWEN_PROMPT, {"parallel_tool_calls": False}).parse(
        "Thinking.\n</think>\n\nChecking.\n" + XML_CALL + "\n" + XML_PING)
    assert [c.name for c in whole.calls] == ["get_weather"]


def test_reply_parser_by_hand():
    parser = ReplyParser(reasoning=ReasoningParser(call_openers=GlmParser.openers),
                         tools=HermesParser(TOOLS, new_id=counter_ids()))
    reply = parser.parse('<think>hm</think><tool_call>{"name": "ping", "arguments": {}}</tool_call>')
    assert reply.reasoning == "hm" and reply.content == "" and [c.name for c in reply.calls] == ["ping"]
    assert ReplyParser().parse(" raw ") == Reply(" raw ", "", [])
    assert ReplyParser(tools=QwenXmlParser(TOOLS)).parse("x").content == "x"
