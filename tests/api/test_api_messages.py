"""Message handling (SPEC.md): system/developer merging, later system messages,
text parts, tool calls, and the caller's objects left untouched."""

from __future__ import annotations

import copy

import pytest

from tensorfold.api.request.build import render_prompt
from tensorfold.api.errors import APIError
from tensorfold.api.request.messages import demote_later_system, merge_leading_system, template_messages
from tensorfold.api.request.parsing import validate
from tensorfold.api.request.schemas import ChatCompletionRequest
from tests.api.fake_engine import FakeTokenizer


def messages_of(raw: list[dict]) -> list[dict]:
    return template_messages(validate(ChatCompletionRequest, {"messages": raw}).messages)


def test_leading_system_and_developer_merge_in_order():
    caller = [{"role": "system", "content": "A"}, {"role": "developer", "content": "B"},
              {"role": "system", "content": "C"}, {"role": "user", "content": "hi"}]
    before = copy.deepcopy(caller)
    out = merge_leading_system(caller)
    assert out == [{"role": "system", "content": "A\n\nB\n\nC"}, {"role": "user", "content": "hi"}]
    assert caller == before
    assert all(o is not c for o in out for c in caller)


def test_later_system_and_developer_stay_in_place():
    caller = [{"role": "developer", "content": "rules"}, {"role": "user", "content": "hi"},
              {"role": "assistant", "content": "hello"}, {"role": "system", "content": "later"},
              {"role": "developer", "content": "later dev"}, {"role": "user", "content": "bye"}]
    before = copy.deepcopy(caller)
    out = merge_leading_system(caller)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "system", "system", "user"]
    assert [m["content"] for m in out] == ["rules", "hi", "hello", "later", "later dev", "bye"]
    assert caller == before


def test_no_leading_system_means_no_system_added():
    out = merge_leading_system([{"role": "user", "content": "hi"}, {"role": "system", "content": "s"}])
    assert [m["role"] for m in out] == ["user", "system"]


def test_demote_later_system_only():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "system", "content": "late"}]
    before = copy.deepcopy(msgs)
    demoted = demote_later_system(msgs)
    assert [m["role"] for m in demoted] == ["system", "user", "user"]
    assert msgs == before
    assert demote_later_system([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]) is None


def test_text_parts_concatenate_in_order_and_caller_is_unchanged():
    caller = [{"role": "system", "content": [{"type": "text", "text": "One"}, {"type": "text", "text": "Two"}]},
              {"role": "developer", "content": "Three"},
              {"role": "user", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b"}]}]
    before = copy.deepcopy(caller)
    out = messages_of(caller)
    assert out == [{"role": "system", "content": "OneTwo\n\nThree"}, {"role": "user", "content": "a b"}]
    assert caller == before


def test_tool_calls_and_results_reach_the_template():
    caller = [{"role": "user", "content": "weather?"},
              {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "call_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
                  {"id": "call_2", "type": "function", "function": {"name": "raw", "arguments": "not json"}}]},
              {"role": "tool", "tool_call_id": "call_1", "content": "cold"}]
    before = copy.deepcopy(caller)
    out = messages_of(caller)
    assert out[1]["content"] == ""
    assert out[1]["tool_calls"][0] == {"id": "call_1", "type": "function",
                                       "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    assert out[1]["tool_calls"][1]["function"]["arguments"] == "not json"
    assert out[2] == {"role": "tool", "content": "cold", "tool_call_id": "call_1"}
    assert caller == before


def test_render_falls_back_to_user_for_a_later_system_message():
    tok = FakeTokenizer()
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
            {"role": "system", "content": "LATE"}]
    ids = render_prompt(tok, msgs, None, {})
    text = tok.decode(ids)
    assert "<|im_start|>system\nS" in text and "<|im_start|>user\nLATE" in text
    assert len(tok.renders) == 2          # refused once, then rendered with the demotion
    assert msgs[2]["role"] == "system"


def test_render_refusal_without_a_later_system_is_a_400():
    class Refusing(FakeTokenizer):
        def render_chat(self, messages, tools=None, add_generation_prompt=True, **kw):
            from tensorfold.checkpoints.errors import TemplateError
            raise TemplateError("chat template error: roles must alternate")

    with pytest.raises(APIError) as info:
        render_prompt(Refusing(), [{"role": "user", "content": "a"}], None, {})
    assert info.value.status == 400 and info.value.param == "messages"
    assert "roles must alternate" in info.value.message
