"""A tiny checkpoint with a Qwen3-style template: think blocks and XML tool calls, end to end."""

from __future__ import annotations

import json

import pytest

from tests.servers import http_server
from tests.tiny import with_template

TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}"
    "</tools><|im_end|>\n{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n"
    "{%- for tc in m.tool_calls %}<tool_call>\n<function={{ tc.function.name }}>\n"
    "{%- for k, v in tc.function.arguments.items() %}<parameter={{ k }}>\n{{ v }}\n</parameter>\n{%- endfor %}"
    "</function>\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{%- endif %}"
    "{%- endif %}")
TOOL = {"type": "function", "function": {"name": "set_alarm", "parameters": {
    "type": "object", "properties": {"hour": {"type": "integer"}, "label": {"type": "string"},
                                     "days": {"type": "array"}}}}}
OTHER = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
CALL = "<tool_call>\n<function=set_alarm>\n<parameter=hour>\n7\n</parameter>\n<parameter=label>\nwake up\n</parameter>\n" \
       "<parameter=days>\n[\"mon\", \"tue\"]\n</parameter>\n</function>\n</tool_call>"


@pytest.fixture(scope="module")
def qwen(tiny_model, tmp_path_factory):
    folder = with_template(tiny_model, tmp_path_factory.mktemp("qwen") / "tiny-qwen-template", TEMPLATE)
    with http_server(folder) as http:       # no --tool-parser: chosen from the template
        yield http


def ask(http, **body):
    r = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Wake me at 7."}],
                                               "max_tokens": 80, "seed": 3, "temperature": 0.8, **body})
    assert r.status_code == 200, r.text
    return r.json()


def escape(text: str) -> str:
    return "".join("\\" + c if c in "{}[]().*+?|^$\\\"" else c for c in text)


def test_xml_call_is_parsed_with_schema_types(qwen):
    reply = ask(qwen, tools=[TOOL], guided_regex=escape(CALL), max_tokens=120)
    assert "tool_calls" in reply["choices"][0]["message"], reply["choices"][0]
    (call,) = reply["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "set_alarm"
    assert json.loads(call["function"]["arguments"]) == {"hour": 7, "label": "wake up", "days": ["mon", "tue"]}
    assert reply["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("choice, name", [("required", "set_alarm"),
                                          ({"type": "function", "function": {"name": "get_time"}}, "get_time")])
def test_forced_call_uses_the_templates_own_call_text(qwen, choice, name):
    reply = ask(qwen, tools=[TOOL, OTHER], tool_choice=choice)
    calls = reply["choices"][0]["message"].get("tool_calls")
    assert calls and calls[0]["function"]["name"] == name       # XML: the call counts once its name is written
    serial = ask(qwen, tools=[TOOL, OTHER], tool_choice=choice, draft=False)
    assert serial["tensorfold"]["token_sha"] == reply["tensorfold"]["token_sha"]


def test_thinking_off_renders_the_empty_block_and_parses_no_reasoning(qwen):
    reply = ask(qwen, reasoning_effort="none", max_tokens=8)
    assert "reasoning_content" not in reply["choices"][0]["message"]
    assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
