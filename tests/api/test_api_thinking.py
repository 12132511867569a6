"""Thinking on a checkpoint whose template opens a think block: budget, effort, parsing, usage."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from tensorfold.config import EngineConfig, ServerConfig
from tensorfold.engine.client import EngineClient
from tests.servers import running

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}{% if reasoning_effort is defined %}[effort {{ reasoning_effort }}]{% endif %}<think>\n"
    "{% endif %}{% endif %}")


@pytest.fixture(scope="module")
def thinking(tiny_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("thinking") / "tiny-thinking"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").write_text(TEMPLATE)
    engine = EngineClient(folder, EngineConfig(dtype="float32", device="cpu", kv_memory=0.1))
    with running(engine, ServerConfig()) as served:
        with httpx.Client(base_url=served.url, timeout=60) as http:
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
