"""Tiny checkpoints with GLM-style and Gemma 4-style templates, end to end: the parser
is chosen from the template, a written call comes back typed by the offered schema
(whole and streamed alike), and a forced call opens with the template's own call text."""

from __future__ import annotations

import json

import pytest

from tests.api.api_helpers import sse_events
from tests.servers import http_server
from tests.tiny import with_template

GLM = (
    "{%- if tools %}<|system|>\n# Tools\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}<|assistant|>\n"
    "{%- for tc in m.tool_calls %}<tool_call>{{ tc.function.name }}\n"
    "{%- for k, v in tc.function.arguments.items() %}<arg_key>{{ k }}</arg_key>\n"
    "<arg_value>{{ v if v is string else v | tojson }}</arg_value>\n{%- endfor %}</tool_call>{%- endfor %}"
    "{%- else %}<|{{ m.role }}|>\n{{ m.content }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>\n{%- endif %}")
GEMMA = (
    "{%- if tools %}<start_of_turn>system\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<end_of_turn>\n"
    "{%- endif %}{%- for m in messages %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}<start_of_turn>model\n"
    "{%- for tc in m.tool_calls %}<|tool_call>call:{{ tc.function.name }}{{ '{' }}"
    "{%- for k, v in tc.function.arguments.items() %}{{ k }}:"
    "{%- if v is string %}<|\"|>{{ v }}<|\"|>{% else %}{{ v | tojson }}{% endif %}"
    "{%- if not loop.last %},{% endif %}{%- endfor %}{{ '}' }}<tool_call|>{%- endfor %}<end_of_turn>\n"
    "{%- else %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<start_of_turn>model\n{%- endif %}")
ALARM = {"type": "function", "function": {"name": "set_alarm", "parameters": {
    "type": "object", "properties": {"hour": {"type": "integer"}, "label": {"type": "string"},
                                     "days": {"type": "array"}}}}}
OTHER = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
CALLS = {
    "glm": "<tool_call>set_alarm\n<arg_key>hour</arg_key>\n<arg_value>7</arg_value>\n"
           "<arg_key>label</arg_key>\n<arg_value>wake up</arg_value>\n"
           "<arg_key>days</arg_key>\n<arg_value>[\"mon\"]</arg_value>\n</tool_call>",
    "gemma4": "<|tool_call>call:set_alarm{hour:7,label:<|\"|>wake up<|\"|>,days:[<|\"|>mon<|\"|>]}<tool_call|>",
}
OPENERS = {"glm": "<tool_call>", "gemma4": "<|tool_call>call:"}
ARGS = {"hour": 7, "label": "wake up", "days": ["mon"]}


@pytest.fixture(scope="module", params=["glm", "gemma4"])
def served(request, tiny_model, tmp_path_factory):
    template = GLM if request.param == "glm" else GEMMA
    folder = with_template(tiny_model, tmp_path_factory.mktemp(request.param) / f"tiny-{request.param}", template)
    with http_server(folder) as http:                 # no --tool-parser: chosen from the template
        yield request.param, http


def escape(text: str) -> str:
    return "".join("\\" + c if c in "{}[]().*+?|^$\\\"" else c for c in text)


def body(**extra):
    return {"messages": [{"role": "user", "content": "Wake me at 7."}], "max_tokens": 160, "seed": 3,
            "temperature": 0.8, **extra}


def test_a_written_call_is_typed_by_the_schema_whole_and_streamed(served):
    fmt, http = served
    ask = body(tools=[ALARM], guided_regex=escape(CALLS[fmt]))
    reply = http.post("/v1/chat/completions", json=ask).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "set_alarm" and json.loads(call["function"]["arguments"]) == ARGS
    assert not choice["message"].get("content")

    events = sse_events(http.post("/v1/chat/completions", json={**ask, "stream": True}))
    deltas = [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e.get("choices")]
    parts = [tc for d in deltas for tc in d.get("tool_calls") or []]
    assert parts[0]["function"]["name"] == "set_alarm" and parts[0]["index"] == 0
    assert json.loads("".join(p["function"].get("arguments") or "" for p in parts)) == ARGS
    assert not "".join(d.get("content") or "" for d in deltas)


@pytest.mark.parametrize("choice, name", [("required", "set_alarm"),
                                          ({"type": "function", "function": {"name": "get_time"}}, "get_time")])
def test_a_forced_call_opens_with_the_templates_call_text(served, choice, name):
    fmt, http = served
    reply = http.post("/v1/chat/completions", json=body(tools=[ALARM, OTHER], tool_choice=choice)).json()
    message = reply["choices"][0]["message"]
    calls = message.get("tool_calls")
    if calls:                                         # a complete call: the offered name
        assert calls[0]["function"]["name"] == name
    else:                                             # a random model may not finish the block: its text stays
        assert message["content"].lstrip().startswith(OPENERS[fmt] + name), message["content"]
    serial = http.post("/v1/chat/completions", json=body(tools=[ALARM, OTHER], tool_choice=choice,
                                                         draft=False)).json()
    assert serial["tensorfold"]["token_sha"] == reply["tensorfold"]["token_sha"]


def test_a_call_cut_by_the_token_limit_finishes_with_length(served):
    fmt, http = served
    reply = http.post("/v1/chat/completions", json=body(tools=[ALARM], guided_regex=escape(CALLS[fmt]),
                                                        max_tokens=30)).json()
    assert reply["choices"][0]["finish_reason"] == "length"
