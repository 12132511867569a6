"""Reasoning blocks: whole == streamed, open/closed blocks, calls written while thinking."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfold.parsers import (REASONING_MARKERS, ContentDelta, ReasoningDelta, ReasoningParser,
                                starts_in_reasoning)

from .test_parsers_common import FAST, cuts_for, split

CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"

# (kwargs, reply, expected reasoning, expected content)
CASES = [
    ({}, "<think>\nI think.\n</think>\n\nAnswer.", "I think.", "Answer."),
    ({}, "\n\n<think>r</think>c", "r", "c"),
    ({}, "<think>\n\n</think>\n\nHi", "", "Hi"),
    ({}, "<think>still thinking, cut", "still thinking, cut", ""),
    ({}, "<think>", "", ""),
    ({}, "Hello <think>not at the start</think>", "", "Hello <think>not at the start</think>"),
    ({}, "  plain answer \n", "", "  plain answer \n"),
    ({}, "<thin", "", "<thin"),
    ({}, "<think>a</think>b</think>c", "a", "b</think>c"),
    ({}, "<think>\n  keep  inner\n\n spacing \n</think>  x  ", "keep  inner\n\n spacing", "x  "),
    ({"starts_inside": True}, "\nI think.\n</think>\n\nAnswer.", "I think.", "Answer."),
    ({"starts_inside": True}, "<think>again</think>done", "again", "done"),
    ({"starts_inside": True}, "no close at all", "no close at all", ""),
    ({"starts_inside": True}, "   ", "", ""),
    ({"starts_inside": True}, "</think>direct answer", "", "direct answer"),
    ({"strip": False}, "<think>\n r \n</think>\n\n a", "\n r \n", "\n\n a"),
    (dict(zip(("open_marker", "close_marker"), REASONING_MARKERS["gemma4"])),
     "<|channel>thought\nPlan it.<channel|>The answer.", "Plan it.", "The answer."),
    (dict(zip(("open_marker", "close_marker"), REASONING_MARKERS["gemma4"])),
     "<|channel>thought\nunfinished", "unfinished", ""),
    # a tool call written before the block closes, and the reply ends in the block
    ({"call_openers": ("<tool_call>",)}, "<think>Need the weather.\n" + CALL, "Need the weather.", CALL),
    ({"call_openers": ("<tool_call>",), "starts_inside": True}, CALL, "", CALL),
    ({"call_openers": ("<tool_call>",), "starts_inside": True}, "A.\n" + CALL + "\nmore thoughts",
     "A.", CALL + "\nmore thoughts"),
    # a call only mentioned while thinking, with the block closed after it, stays reasoning
    ({"call_openers": ("<tool_call>",)}, "<think>I could write " + CALL + " but no.\n</think>\n\nIt is sunny.",
     "I could write " + CALL + " but no.", "It is sunny."),
    ({"call_openers": ("<tool_call>",)}, "<think>x <tool_call></think>y", "x <tool_call>", "y"),
    ({"call_openers": ("<|tool_call>",), "open_marker": "<|channel>thought", "close_marker": "<channel|>"},
     "<|channel>thought\nCall it.\n<|tool_call>call:f{}<tool_call|>", "Call it.", "<|tool_call>call:f{}<tool_call|>"),
]


def stream(kwargs, chunks):
    p = ReasoningParser(**kwargs)
    events = []
    for c in chunks:
        events += p.feed(c)
    events += p.end()
    for e in events:
        assert e.text
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    return reasoning, content


@pytest.mark.parametrize("kwargs, text, reasoning, content", CASES)
def test_cases_whole_and_streamed(kwargs, text, reasoning, content):
    assert ReasoningParser(**kwargs).parse(text) == (reasoning, content)
    assert stream(kwargs, [text]) == (reasoning, content)
    assert stream(kwargs, list(text)) == (reasoning, content)


@pytest.mark.parametrize("case", range(len(CASES)))
@FAST
@given(data=st.data())
def test_random_chunkings(case, data):
    kwargs, text, reasoning, content = CASES[case]
    assert stream(kwargs, split(text, data.draw(cuts_for(text)))) == (reasoning, content)


def test_streamed_reasoning_never_carries_the_call_markup():
    p = ReasoningParser(starts_inside=True, call_openers=("<tool_call>",))
    seen = []
    for ch in "Let me call it.\n" + CALL:
        for e in p.feed(ch):
            seen.append(e)
    assert all(isinstance(e, ReasoningDelta) for e in seen)
    assert "".join(e.text for e in seen) == "Let me call it."
    assert p.end() == [ContentDelta(CALL)]


def test_reasoning_streams_before_the_block_closes():
    p = ReasoningParser()
    assert p.feed("<think>\nStep one. ") == [ReasoningDelta("Step one.")]
    assert p.feed("Step two.\n</th") == [ReasoningDelta(" Step two.")]
    assert p.feed("ink>\n\nAns") == [ContentDelta("Ans")]
    assert p.feed("wer") == [ContentDelta("wer")]
    assert p.end() == []


def test_held_call_is_released_as_reasoning_when_the_block_closes():
    p = ReasoningParser(starts_inside=True, call_openers=("<tool_call>",))
    assert p.feed("Maybe ") == [ReasoningDelta("Maybe")]
    assert p.feed("<tool_call>x") == []
    assert p.feed("</think>ok") == [ReasoningDelta(" <tool_call>x"), ContentDelta("ok")]


@pytest.mark.parametrize("prompt, inside", [
    ("<|im_start|>assistant\n<think>\n", True),
    ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
    ("<|im_start|>assistant\n", False),
    ("<|assistant|><think></think>", False),
])
def test_starts_in_reasoning(prompt, inside):
    assert starts_in_reasoning(prompt) is inside
