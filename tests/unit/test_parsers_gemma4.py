"""Gemma 4 <|tool_call>call:NAME{...}<tool_call|> calls: whole == streamed, non-calls stay content."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfold.parsers import ContentDelta, Gemma4Parser, ToolCallArgsDelta, ToolCallEnd, ToolCallStart

from .test_parsers_common import FAST, assert_stream_matches, calls_as_dicts, counter_ids, cuts_for

TOOLS = {"get_weather": {}, "search": {}, "ping": {}}
Q = '<|"|>'


def call(body: str) -> str:
    return f"<|tool_call>call:{body}<tool_call|>"


W = call(f"get_weather{{location:{Q}Paris, FR{Q},days:3}}")

CASES = [
    ("Plain prose {x:1} and <|channel> tokens.", "Plain prose {x:1} and <|channel> tokens.", []),
    (W, "", [("get_weather", {"location": "Paris, FR", "days": 3})]),
    ("Let me check." + W, "Let me check.", [("get_weather", {"location": "Paris, FR", "days": 3})]),
    (W + call("ping{}") + "\nDone.", "Done.", [("get_weather", {"location": "Paris, FR", "days": 3}),
                                              ("ping", {})]),
    (call(f"search{{flag:true,n:-3,r:2.5e1,z:false,none:null,s:{Q}hi{Q}}}"), "",
     [("search", {"flag": True, "n": -3, "r": 25.0, "z": False, "none": None, "s": "hi"})]),
    (call(f"search{{a:{{x:1,y:{Q}q{Q}}},xs:[1,2,3],ss:[{Q}a{Q},{Q}b{Q}],e:[],o:{{}}}}"), "",
     [("search", {"a": {"x": 1, "y": "q"}, "xs": [1, 2, 3], "ss": ["a", "b"], "e": [], "o": {}})]),
    # inside a string every character is literal, markers included
    (call(f"search{{q:{Q}a{{b}},c[d] <tool_call|> <|tool_call>call:ping{{}} \n \"{Q}}}"), "",
     [("search", {"q": 'a{b},c[d] <tool_call|> <|tool_call>call:ping{} \n "'})]),
    (call(' search { "q" : "json \\"quoted\\"" , k : 1 } '), "", [("search", {"q": 'json "quoted"', "k": 1})]),
    (call(f"search{{{Q}quoted key{Q}:1}}"), "", [("search", {"quoted key": 1})]),
]

NOT_CALLS = [
    "Talking about <|tool_call> in prose.",
    call("launch{x:1}"),
    call("get_weather"),
    call("get_weather{x:1"),
    call(f"get_weather{{x:{Q}unterminated}}"),
    call("get_weather{xs:[1,2}"),
    call("get_weather{xs:[1,}"),
    call("get_weather{city:Paris}"),
    call("get_weather{x:1} trailing"),
    call("get_weather{x:1,}"),
    "<|tool_call>not-a-call{x:2}<tool_call|>",
    '<|tool_call>{"name": "get_weather"}<tool_call|>',
    "<|tool_call>call:get_weather{x:1",
    "<|tool_call>",
    "<|tool_ca",
]


@pytest.mark.parametrize("text, content, calls", CASES)
def test_cases_whole_and_streamed(text, content, calls):
    reply = assert_stream_matches(Gemma4Parser, TOOLS, text)
    assert reply.content == content
    assert calls_as_dicts(reply) == calls


@pytest.mark.parametrize("text", NOT_CALLS)
def test_non_calls_keep_their_text_as_content(text):
    reply = assert_stream_matches(Gemma4Parser, TOOLS, text)
    assert reply.calls == [] and reply.content == text


def test_malformed_block_beside_valid_ones():
    text = "A " + call("ping{}") + call("get_weather{xs:[1,}}") + call("search{y:2}") + " B"
    reply = assert_stream_matches(Gemma4Parser, TOOLS, text)
    assert calls_as_dicts(reply) == [("ping", {}), ("search", {"y": 2})]
    assert reply.content == "A<|tool_call>call:get_weather{xs:[1,}}<tool_call|> B"


def test_cut_off_block_then_a_valid_one():
    text = "A <|tool_call>call:get_weather{x:1" + call("ping{}") + " B"
    reply = assert_stream_matches(Gemma4Parser, TOOLS, text)
    assert calls_as_dicts(reply) == [("ping", {})]
    assert reply.content == "A <|tool_call>call:get_weather{x:1 B"


@pytest.mark.parametrize("text", [c[0] for c in CASES] + NOT_CALLS)
@FAST
@given(data=st.data())
def test_random_chunkings(text, data):
    assert_stream_matches(Gemma4Parser, TOOLS, text, data.draw(cuts_for(text)))


def test_call_goes_out_at_the_close_marker():
    p = Gemma4Parser(TOOLS, new_id=counter_ids())
    assert p.feed(f"Hi<|tool_call>call:ping{{a:{Q}<tool_call|>") == [ContentDelta("Hi")]
    assert p.feed(f"{Q}}}<tool_") == []
    assert p.feed("call|>") == [ToolCallStart(0, "call_0", "ping"), ToolCallArgsDelta(0, '{"a": "<tool_call|>"}'),
                                ToolCallEnd(0)]


def test_parallel_tool_calls_false():
    reply = assert_stream_matches(Gemma4Parser, TOOLS, W + call("ping{}"), parallel_tool_calls=False)
    assert [c.name for c in reply.calls] == ["get_weather"]
