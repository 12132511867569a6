"""Thinking on a checkpoint whose template opens a think block: budget, effort, parsing, usage."""

from __future__ import annotations

import pytest

from tests.servers import http_server
from tests.tiny import with_template

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}{% if reasoning_effort is defined %}[effort {{ reasoning_effort }}]{% endif %}<think>\n"
    "{% endif %}{% endif %}")


@pytest.fixture(scope="module")
def thinking(tiny_model, tmp_path_factory):
    folder = with_template(tiny_model, tmp_path_factory.mktemp("thinking") / "tiny-thinking", TEMPLATE)
    with http_server(folder) as http:
        yield http


def ask(http, **body):
    r = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Think, then answer."}],
                                               "max_tokens": 24, "ignore_eos": True, "seed": 5, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_budget_closes_the_block_and_usage_counts_thinking(thinking):
    reply = ask(thinking, thinking_budget=6)
    message, usage = reply["choices"][0]["message"], reply["usage"]
    assert message["reasoning_content"] and message["content"]
    reasoning = usage["completion_tokens_details"]["reasoning_tokens"]
    assert 6 <= reasoning < usage["completion_tokens"]
    serial = ask(thinking, thinking_budget=6, draft=False)
    assert serial["tensorfold"]["token_sha"] == reply["tensorfold"]["token_sha"]


def test_an_unclosed_block_is_all_reasoning(thinking):
    reply = ask(thinking)
    assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == reply["usage"]["completion_tokens"]
    assert not reply["choices"][0]["message"]["content"]


def test_effort_none_turns_thinking_off(thinking):
    reply = ask(thinking, reasoning_effort="none")
    assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    assert "reasoning_content" not in reply["choices"][0]["message"]


def test_grammar_starts_after_the_think_end(thinking):
    reply = ask(thinking, thinking_budget=4, guided_choice=["yes", "no"], ignore_eos=False, max_tokens=40)
    message = reply["choices"][0]["message"]
    assert message["reasoning_content"] and message["content"] in ("yes", "no")
