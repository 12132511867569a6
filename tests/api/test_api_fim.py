"""Fill in the middle: `suffix` on /v1/completions, through the official openai client.

A checkpoint whose tokenizer has FIM tokens gets the prompt <fim prefix> prompt
<fim suffix> suffix <fim middle>; one without them gets a 400 naming `suffix`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import openai
import pytest

from tensorfold.config import EngineConfig, ServerConfig
from tests.servers import running
from tests.tiny import make_tiny_checkpoint

FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")


def fim_checkpoint(default_model: Path, out: Path) -> Path:
    """A tiny checkpoint with the default model's tokenizer plus Qwen2.5-Coder's three FIM tokens."""
    from transformers import AutoTokenizer

    src = out / "tokenizer-with-fim"
    tok = AutoTokenizer.from_pretrained(str(default_model), local_files_only=True)
    tok.add_special_tokens({"additional_special_tokens": list(FIM)})
    tok.save_pretrained(str(src))
    config = json.loads((default_model / "config.json").read_text())
    config["vocab_size"] = len(tok)
    (src / "config.json").write_text(json.dumps(config))
    shutil.copy(default_model / "generation_config.json", src / "generation_config.json")
    return make_tiny_checkpoint(out / "tiny-fim", src)


@pytest.fixture(scope="module")
def fim(default_model, tmp_path_factory):
    from tensorfold.engine.async_engine import AsyncEngine

    folder = fim_checkpoint(default_model, tmp_path_factory.mktemp("fim"))
    engine = AsyncEngine(folder, EngineConfig(dtype="float32", device="cpu", kv_memory=0.1))
    with running(engine, ServerConfig()) as served:
        with openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0, timeout=60) as client:
            yield served, client


def test_suffix_runs_the_fim_prompt(fim):
    served, client = fim
    tok = served.engine.tokenizer
    pre, suf, mid = tok.fim_ids
    assert tok.convert_ids_to_tokens([pre, suf, mid]) == list(FIM)
    prompt, suffix = "def area(r):\n    return ", "\n\nprint(area(2))\n"
    args = {"model": served.served_id, "max_tokens": 12, "temperature": 0}
    got = client.completions.create(prompt=prompt, suffix=suffix, **args)
    ids = [pre, *tok.encode(prompt), suf, *tok.encode(suffix), mid]
    want = client.completions.create(prompt=ids, **args)
    assert got.usage.prompt_tokens == len(ids)
    assert got.choices[0].text == want.choices[0].text and got.choices[0].text
    assert got.choices[0].finish_reason == want.choices[0].finish_reason


def test_suffix_with_token_ids_and_streaming(fim):
    served, client = fim
    tok = served.engine.tokenizer
    head = tok.encode("x = ")
    args = {"model": served.served_id, "max_tokens": 8, "temperature": 0, "suffix": "\ny = x\n"}
    whole = client.completions.create(prompt=head, **args)
    streamed = "".join(c.choices[0].text for c in client.completions.create(prompt=head, stream=True, **args)
                       if c.choices)
    assert streamed == whole.choices[0].text
    assert whole.usage.prompt_tokens == len(head) + len(tok.encode("\ny = x\n")) + 3


def test_suffix_without_fim_tokens_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=client.models.list().data[0].id, prompt="def f(", suffix="):\n")
    assert err.value.body["param"] == "suffix"
    assert "FIM tokens" in err.value.body["message"]
