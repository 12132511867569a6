"""The forced-call rule (tool_choice "required" or a named function), token by token."""

from __future__ import annotations

import pytest

from tensorfold.engine.constraints import ToolForce, cut_drafts
from tensorfold.engine.types import Think


@pytest.fixture(scope="module")
def tok(default_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model)


def force(tok, think=None):
    prefix = tuple(tok.encode('<tool_call>\n{"name": "'))
    return ToolForce(prefix, ("get_weather", "get_time"), '"', tok.decode, tok.encode, think)


def written(rule, tok, tokens):
    """The reply a model that always proposes `tokens` in turn ends up with."""
    reply: list[int] = []
    for t in tokens:
        reply.append(rule.replace(reply, t))
    return tok.decode(reply)


def test_the_first_answer_token_opens_the_call_and_the_name_is_held(tok):
    rule = force(tok)
    text = written(rule, tok, tok.encode("  Sure, here is the weather for you") * 3)
    assert any(text.lstrip().startswith(f'<tool_call>\n{{"name": "{n}"') for n in ("get_weather", "get_time")), text


def test_a_reply_may_open_its_think_block_first_and_the_call_follows_it(tok):
    opener = tok.convert_tokens_to_ids("<|im_start|>")          # a one-token opener stands in for <think>
    close = tuple(tok.encode("</think>"))
    rule = force(tok, Think((opener,), close))
    thinking = [opener] + tok.encode("I should call a tool.") + list(close)
    thought = thinking + tok.encode("\n\nSure thing")
    reply: list[int] = []
    for t in thought:
        reply.append(rule.replace(reply, t))
    assert reply[: len(thinking)] == thinking                       # the block is left alone
    assert tok.decode(reply).startswith("<|im_start|>I should call a tool.</think>\n\n<tool")  # the call opens
    # the opener counts only as the first token; anywhere else it is an answer token
    assert rule.replace([], opener) == opener
    assert rule.replace(tok.encode(" "), opener) == rule.prefix[0]
    assert cut_drafts([rule], [], [opener] + tok.encode("free text")) == [opener] + tok.encode("free text")
    # a multi-token opener cannot be told from answer text at the first token: the call starts at once
    multi = force(tok, Think(tuple(tok.encode("<think>")), close))
    assert multi.replace([], tok.encode("<think>")[0]) == multi.prefix[0]
