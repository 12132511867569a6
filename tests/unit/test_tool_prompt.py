"""The built-in Hermes tool prompt for ChatML templates without a tool format (SmolLM2's)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tensorfold.api.request import build
from tensorfold.api.request.chat_format import ChatFormat
from tensorfold.api.request.tool_force import USUAL
from tensorfold.api.request.tool_prompt import ToolFormat, hermes_messages, tool_format
from tensorfold.api.request.schemas import ChatCompletionRequest
from tensorfold.config import ServerConfig

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = {"role": "user", "content": "Weather in Paris?"}
CALLED = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}
CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def test_the_format_comes_from_the_template_then_chatml_and_tool_parser_overrides():
    assert tool_format(CHATML, None) == ToolFormat("hermes", builtin=True)
    assert tool_format(CHATML, "hermes") == ToolFormat("hermes", builtin=True)
    assert tool_format(CHATML, "json") == ToolFormat("json", builtin=False)       # --tool-parser wins
    assert tool_format("{{ messages }}", None) == ToolFormat(None)                   # not ChatML: no tools
    qwen = CHATML + "{% if tools %}<tool_call>{% endif %}"
    assert tool_format(qwen, None) == ToolFormat("hermes", builtin=False)          # the template's own
    assert tool_format(qwen, "qwen_xml") == ToolFormat("qwen_xml", builtin=False)


def test_messages_carry_tools_calls_and_results_as_hermes_text():
    system = {"role": "system", "content": "Be brief."}
    out = hermes_messages([system, ASK, CALLED, RESULT, dict(RESULT, content="windy")], [TOOL])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("Be brief.\n\n# Tools\n")
    assert json.dumps(TOOL) in out[0]["content"] and "<tool_call></tool_call> XML tags" in out[0]["content"]
    assert out[2]["content"] == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert "tool_calls" not in out[2]
    assert out[3]["content"] == ("<tool_response>\n18 C, sunny\n</tool_response>\n"
                                 "<tool_response>\nwindy\n</tool_response>")
    assert hermes_messages([ASK], None) == [ASK]                  # no tools: no tools section
    assert hermes_messages([ASK], [TOOL])[0]["role"] == "system"  # no system message: one is added


@pytest.fixture(scope="module")
def engine(default_model):
    from tensorfold.checkpoints.tokenizer import Tokenizer

    return SimpleNamespace(tokenizer=Tokenizer(default_model), context_length=2048)


def prompt_of(engine, config=ServerConfig(), **body):
    chat = ChatFormat.of(engine.tokenizer, config.tool_parser)
    request = build.chat_request(ChatCompletionRequest.model_validate(body), engine, config, chat, "r")
    return engine.tokenizer.decode(request.prompt), request


def test_the_default_models_prompt_shows_the_tools(engine):
    text, _ = prompt_of(engine, messages=[ASK], tools=[TOOL])
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert "<tools>\n" + json.dumps(TOOL) + "\n</tools>" in text
    assert text.endswith("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    hidden, _ = prompt_of(engine, messages=[ASK], tools=[TOOL], tool_choice="none")
    assert "<tools>" not in hidden


def test_the_default_models_prompt_renders_the_round_trip(engine):
    text, _ = prompt_of(engine, messages=[ASK, CALLED, RESULT], tools=[TOOL])
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n18 C, sunny\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n") in text


def test_a_forced_call_opens_with_the_hermes_text(engine):
    _, request = prompt_of(engine, messages=[ASK], tools=[TOOL], tool_choice="required")
    (force,) = [c for c in request.constraints if hasattr(c, "names")]
    assert engine.tokenizer.decode(force.prefix) == USUAL["hermes"][0] and force.names == ("get_weather",)


def test_another_tool_parser_leaves_the_template_alone(engine):
    text, request = prompt_of(engine, ServerConfig(tool_parser="json"), messages=[ASK], tools=[TOOL],
                              tool_choice="required")
    assert "<tools>" not in text
    (force,) = [c for c in request.constraints if hasattr(c, "names")]
    assert engine.tokenizer.decode(force.prefix) == USUAL["json"][0]
