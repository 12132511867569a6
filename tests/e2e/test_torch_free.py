"""A real `tensorfold serve` on the default model (a GGUF, on the CPU) never loads torch:
the native engine, the numpy sampler and rules, and the tokenizer its conversion names;
grammars live in the grammar host (grammar/host.py), a process of their own, since
xgrammar imports torch. Answering with sampling, penalties, logit_bias, a stream, a JSON
schema and a forced tool call leaves libtorch unmapped in the server."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests.servers import serve_default

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps")


def _mapped_torch(pid: int) -> list[str]:
    return sorted({line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                   if "libtorch" in line})


def test_a_cpu_serve_answers_without_loading_torch(default_model):
    from tensorfold.checkpoints.tokenizer import Tokenizer

    Tokenizer(default_model)        # an older conversion records its tokenizer class here, once
    server, url = serve_default()
    try:
        with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120) as client:
            model = client.models.list().data[0].id
            ask = [{"role": "user", "content": "Name three colours."}]
            greedy = client.chat.completions.create(model=model, messages=ask, max_tokens=12, temperature=0)
            sampled = client.chat.completions.create(
                model=model, messages=ask, max_tokens=12, temperature=0.8, top_p=0.9, seed=7,
                frequency_penalty=0.5, presence_penalty=0.3, logit_bias={"28": 3},
                extra_body={"repetition_penalty": 1.1, "top_k": 40, "min_p": 0.05})
            streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
                model=model, messages=ask, max_tokens=12, temperature=0, stream=True) if c.choices)
            shaped = client.chat.completions.create(
                model=model, messages=ask, max_tokens=60, temperature=0,
                response_format={"type": "json_schema", "json_schema": {"name": "colours", "strict": True, "schema": {
                    "type": "object", "properties": {"colours": {"type": "array", "items": {"type": "string"},
                                                                 "minItems": 1, "maxItems": 3}},
                    "required": ["colours"], "additionalProperties": False}}})
            tools = [{"type": "function", "function": {"name": "paint", "parameters": {
                "type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}}}]
            called = client.chat.completions.create(model=model, messages=ask, max_tokens=40, temperature=0,
                                                    tools=tools, tool_choice="required")
        assert greedy.choices[0].message.content and sampled.choices[0].message.content
        assert streamed == greedy.choices[0].message.content
        assert isinstance(json.loads(shaped.choices[0].message.content)["colours"], list)
        call = called.choices[0].message.tool_calls[0].function
        assert call.name == "paint" and isinstance(json.loads(call.arguments)["colour"], str)
        assert _mapped_torch(server.pid) == []
    finally:
        server.terminate()
        server.wait(timeout=30)
