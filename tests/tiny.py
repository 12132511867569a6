"""Tiny random checkpoints for engine and API tests.

A few layers with random weights, and the real default model's tokenizer and
chat template, so prompts, special tokens and templates are the real ones
while a forward takes milliseconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "special_tokens_map.json", "generation_config.json")


def make_tiny_checkpoint(out: Path, tokenizer_src: Path, arch: str = "LlamaForCausalLM",
                         seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 4,
                         kv_heads: int = 2, max_positions: int = 2048, tied: bool = False) -> Path:
    """`tied`: the output head is the embedding, so the model tends to echo its input (long
    repeats that prompt-lookup drafts predict); otherwise a random head (varied replies)."""
    src_config = json.loads((tokenizer_src / "config.json").read_text())
    src_config = {**src_config.get("text_config", {}), **src_config}      # a multimodal source's text part
    vocab = src_config["vocab_size"]
    head_dim = hidden // heads
    config = {
        "architectures": [arch],
        "model_type": {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                       "Qwen3ForCausalLM": "qwen3"}[arch],
        "hidden_size": hidden, "intermediate_size": hidden * 2, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "vocab_size": vocab, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_position_embeddings": max_positions, "tie_word_embeddings": tied,
        "bos_token_id": src_config.get("bos_token_id"), "eos_token_id": src_config.get("eos_token_id"),
        "torch_dtype": "float32",
    }
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int, scale: float = 0.08) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * scale

    w = {"model.embed_tokens.weight": rand(vocab, hidden, scale=1.0),
         "model.norm.weight": torch.ones(hidden)}
    if not tied:
        w["lm_head.weight"] = rand(vocab, hidden, scale=0.3)
    for i in range(layers):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = rand(heads * head_dim, hidden)
        w[p + "self_attn.k_proj.weight"] = rand(kv_heads * head_dim, hidden)
        w[p + "self_attn.v_proj.weight"] = rand(kv_heads * head_dim, hidden)
        w[p + "self_attn.o_proj.weight"] = rand(hidden, heads * head_dim)
        if arch == "Qwen2ForCausalLM":
            for n, size in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
                w[p + f"self_attn.{n}_proj.bias"] = rand(size * head_dim)
        if arch == "Qwen3ForCausalLM":
            w[p + "self_attn.q_norm.weight"] = 1 + rand(head_dim)
            w[p + "self_attn.k_norm.weight"] = 1 + rand(head_dim)
        w[p + "mlp.gate_proj.weight"] = rand(hidden * 2, hidden)
        w[p + "mlp.up_proj.weight"] = rand(hidden * 2, hidden)
        w[p + "mlp.down_proj.weight"] = rand(hidden, hidden * 2)
        w[p + "input_layernorm.weight"] = 1 + rand(hidden)
        w[p + "post_attention_layernorm.weight"] = 1 + rand(hidden)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in w.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=1))
    for name in TOKENIZER_FILES:
        if (tokenizer_src / name).exists():
            shutil.copy(tokenizer_src / name, out / name)
    return out


def with_template(src: Path, out: Path, template: str) -> Path:
    """A copy of checkpoint `src` whose chat template is `template`."""
    shutil.copytree(src, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    (out / "chat_template.jinja").write_text(template)
    return out


def make_tiny_hybrid(out: Path, tokenizer_src: Path, seed: int = 0, layers: int = 4, tied: bool = False) -> Path:
    """A random Qwen3.5 hybrid (Gated DeltaNet layers, every fourth gated attention) built
    with transformers' own config and model classes, with the default model's tokenizer
    and chat template.  Weights are bf16-exact fp32, so any kind of weights loads them as
    they are.  `tied`: the output head is the embedding (the model tends to echo)."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    src_config = json.loads((tokenizer_src / "config.json").read_text())
    config = Qwen3_5TextConfig(**_hybrid_text(src_config, src_config["vocab_size"], layers, tie_word_embeddings=tied,
                                              bos_token_id=src_config.get("bos_token_id")))
    torch.manual_seed(seed)
    return _save_random(Qwen3_5ForCausalLM(config), out, tokenizer_src)


def _hybrid_text(src_config: dict, vocab: int, layers: int, **extra) -> dict:
    """The tiny hybrid's text config: 4 heads of 32 (rope on 8 dims), deltanet heads of 16."""
    return dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
                linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                linear_conv_kernel_dim=4, max_position_embeddings=2048, eos_token_id=src_config.get("eos_token_id"),
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": [2, 1, 1], "mrope_interleaved": True}, **extra)


def _save_random(model, out: Path, tokenizer_src: Path) -> Path:
    """`model` with random bf16-exact weights, saved with `tokenizer_src`'s tokenizer files."""
    with torch.no_grad():
        for name, p in model.eval().named_parameters():
            scale = 0.1 if "norm" in name else 0.5 if ("A_log" in name or "dt_bias" in name) else \
                1.0 if "embed_tokens" in name else 0.15
            p.copy_((torch.randn_like(p) * scale).to(torch.bfloat16).to(torch.float32))
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (tokenizer_src / name).exists() and name != "generation_config.json":
            shutil.copy(tokenizer_src / name, out / name)
    return out


def _tiled(rows: "np.ndarray", k_heads: int, v_heads: int, size: int) -> "np.ndarray":
    """Value heads (each `size` rows) from grouped-by-key-head order into llama.cpp's tiled one."""
    return rows.reshape(k_heads, v_heads // k_heads, size, *rows.shape[1:]).swapaxes(0, 1).reshape(rows.shape)


def write_hybrid_gguf(hf_folder: Path, path: Path, tokenizer_gguf: Path) -> Path:
    """The tiny hybrid as a qwen35 GGUF in llama.cpp's layout (what its convert_hf_to_gguf.py
    writes, checked tensor by tensor against it): zero-centered norms as 1 + weight, A_log
    as -exp(A_log), the deltanet's value heads tiled, F32 tensors; the tokenizer's metadata
    copied from `tokenizer_gguf` (the default model's file, whose tokenizer the tiny models use)."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    c = json.loads((hf_folder / "config.json").read_text())
    c = c.get("text_config", c)
    hk, hv, dk, dv = (c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
                      c["linear_value_head_dim"])
    w = {k.replace("model.language_model.", "model."): v.astype(np.float32)
         for k, v in load_file(str(hf_folder / "model.safetensors")).items() if not k.startswith("model.visual.")}
    keys = 2 * hk * dk

    def tile(x: np.ndarray, size: int) -> np.ndarray:
        return _tiled(x, hk, hv, size)

    out: dict[str, np.ndarray] = {"token_embd.weight": w["model.embed_tokens.weight"],
                                  "output_norm.weight": w["model.norm.weight"] + 1}
    if "lm_head.weight" in w:
        out["output.weight"] = w["lm_head.weight"]
    for i, kind in enumerate(c["layer_types"]):
        p, g = f"model.layers.{i}.", f"blk.{i}."
        out[g + "attn_norm.weight"] = w[p + "input_layernorm.weight"] + 1
        out[g + "post_attention_norm.weight"] = w[p + "post_attention_layernorm.weight"] + 1
        for part in ("gate", "up", "down"):
            out[g + f"ffn_{part}.weight"] = w[p + f"mlp.{part}_proj.weight"]
        if kind == "full_attention":
            a = p + "self_attn."
            for src, dst in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
                out[g + dst + ".weight"] = w[a + src + ".weight"]
            out[g + "attn_q_norm.weight"] = w[a + "q_norm.weight"] + 1
            out[g + "attn_k_norm.weight"] = w[a + "k_norm.weight"] + 1
            continue
        d = p + "linear_attn."
        qkv, conv = w[d + "in_proj_qkv.weight"], w[d + "conv1d.weight"].reshape(keys + hv * dv, -1)
        out[g + "attn_qkv.weight"] = np.concatenate([qkv[:keys], tile(qkv[keys:], dv)])
        out[g + "ssm_conv1d.weight"] = np.concatenate([conv[:keys], tile(conv[keys:], dv)])
        out[g + "attn_gate.weight"] = tile(w[d + "in_proj_z.weight"], dv)
        out[g + "ssm_beta.weight"] = tile(w[d + "in_proj_b.weight"], 1)
        out[g + "ssm_alpha.weight"] = tile(w[d + "in_proj_a.weight"], 1)
        out[g + "ssm_out.weight"] = np.ascontiguousarray(tile(w[d + "out_proj.weight"].T, dv).T)
        out[g + "ssm_dt.bias"] = tile(w[d + "dt_bias"], 1)
        out[g + "ssm_a"] = tile(-np.exp(w[d + "A_log"].astype(np.float64)).astype(np.float32), 1)
        out[g + "ssm_norm.weight"] = w[d + "norm.weight"]

    arch = "qwen35"
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(c["num_hidden_layers"])
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_feed_forward_length(c["intermediate_size"])
    writer.add_head_count(c["num_attention_heads"])
    writer.add_head_count_kv(c["num_key_value_heads"])
    writer.add_key_length(c["head_dim"])
    writer.add_value_length(c["head_dim"])
    writer.add_layer_norm_rms_eps(c["rms_norm_eps"])
    rope = c["rope_parameters"]
    writer.add_rope_freq_base(rope["rope_theta"])
    writer.add_uint32(f"{arch}.rope.dimension_count", int(c["head_dim"] * rope["partial_rotary_factor"]))
    writer.add_array(f"{arch}.rope.dimension_sections", [*rope["mrope_section"], 0])
    for key, value in (("ssm.conv_kernel", c["linear_conv_kernel_dim"]), ("ssm.state_size", dk),
                       ("ssm.group_count", hk), ("ssm.time_step_rank", hv), ("ssm.inner_size", hv * dv),
                       ("full_attention_interval", c.get("full_attention_interval", 4))):
        writer.add_uint32(f"{arch}.{key}", value)
    writer.add_array(f"{arch}.attention.recurrent_layers", [t == "linear_attention" for t in c["layer_types"]])
    reader = gguf.GGUFReader(str(tokenizer_gguf))
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            value = field.contents()
            if isinstance(value, list):
                writer.add_array(key, value)
            elif isinstance(value, str):
                writer.add_string(key, value)
            elif isinstance(value, bool):
                writer.add_bool(key, value)
            else:
                writer.add_uint32(key, int(value))
    return _write_tensors(writer, out, path)


VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>")
# ChatML whose content parts may be images (as Qwen3.5's own template renders them)
VISION_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] in ('image', 'image_url') %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def make_tiny_vision(out: Path, tokenizer_src: Path, seed: int = 0) -> Path:
    """A random Qwen3.5 hybrid with a tiny vision tower (transformers' own classes), the
    default model's tokenizer with Qwen's three vision tokens added, a chat template that
    renders image parts, and a small image processor (16-pixel patches, 32..256 pixels a
    side)."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    src_config = json.loads((tokenizer_src / "config.json").read_text())
    vocab = src_config["vocab_size"]
    start, end, pad = vocab, vocab + 1, vocab + 2
    text = _hybrid_text(src_config, vocab + 8, 4)
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, temporal_patch_size=2,
                  spatial_merge_size=2, out_hidden_size=64, num_position_embeddings=16)
    config = Qwen3_5Config(text_config=text, vision_config=vision, image_token_id=pad, vision_start_token_id=start,
                           vision_end_token_id=end, video_token_id=vocab + 3)
    torch.manual_seed(seed)
    _save_random(Qwen3_5ForConditionalGeneration(config), out, tokenizer_src)
    tok = json.loads((out / "tokenizer.json").read_text())
    for i, content in zip((start, end, pad), VISION_TOKENS):
        tok["added_tokens"].append({"id": i, "content": content, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
    (out / "tokenizer.json").write_text(json.dumps(tok))
    tc = json.loads((out / "tokenizer_config.json").read_text())
    tc["chat_template"] = VISION_TEMPLATE
    tc.setdefault("added_tokens_decoder", {}).update({str(i): {
        "content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
        for i, c in zip((start, end, pad), VISION_TOKENS)})
    (out / "tokenizer_config.json").write_text(json.dumps(tc))
    (out / "chat_template.jinja").unlink(missing_ok=True)
    (out / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "temporal_patch_size": 2,
        "merge_size": 2, "size": {"shortest_edge": 32 * 32, "longest_edge": 256 * 256},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}))
    return out


def write_mmproj(hf_folder: Path, path: Path) -> Path:
    """A Qwen3.5 checkpoint's vision tower as llama.cpp's mmproj GGUF (what its converter
    writes with --mmproj, checked tensor by tensor against it): the same tensors renamed,
    the patch conv split into its two time steps, F32."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    c = json.loads((hf_folder / "config.json").read_text())["vision_config"]
    pre = json.loads((hf_folder / "preprocessor_config.json").read_text())
    w = {k[len("model.visual."):]: v.astype(np.float32)
         for k, v in load_file(str(hf_folder / "model.safetensors")).items() if k.startswith("model.visual.")}
    names = {"attn.qkv": "attn_qkv", "attn.proj": "attn_out", "mlp.linear_fc1": "ffn_up",
             "mlp.linear_fc2": "ffn_down", "norm1": "ln1", "norm2": "ln2"}
    out = {"v.patch_embd.weight": w["patch_embed.proj.weight"][:, :, 0],
           "v.patch_embd.weight.1": w["patch_embed.proj.weight"][:, :, 1],
           "v.patch_embd.bias": w["patch_embed.proj.bias"], "v.position_embd.weight": w["pos_embed.weight"],
           "v.post_ln.weight": w["merger.norm.weight"], "v.post_ln.bias": w["merger.norm.bias"],
           "mm.0.weight": w["merger.linear_fc1.weight"], "mm.0.bias": w["merger.linear_fc1.bias"],
           "mm.2.weight": w["merger.linear_fc2.weight"], "mm.2.bias": w["merger.linear_fc2.bias"]}
    for i in range(c["depth"]):
        for hf, gg in names.items():
            for kind in ("weight", "bias"):
                out[f"v.blk.{i}.{gg}.{kind}"] = w[f"blocks.{i}.{hf}.{kind}"]
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_string("general.type", "mmproj")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_string("clip.projector_type", "qwen3vl_merger")
    for key, value in (("projection_dim", c["out_hidden_size"]), ("patch_size", c["patch_size"]),
                       ("image_size", int(c["num_position_embeddings"] ** 0.5) * c["patch_size"]),
                       ("embedding_length", c["hidden_size"]), ("feed_forward_length", c["intermediate_size"]),
                       ("block_count", c["depth"]), ("attention.head_count", c["num_heads"]),
                       ("spatial_merge_size", c["spatial_merge_size"])):
        writer.add_uint32(f"clip.vision.{key}", value)
    writer.add_array("clip.vision.image_mean", pre["image_mean"])
    writer.add_array("clip.vision.image_std", pre["image_std"])
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    writer.add_bool("clip.use_gelu", True)
    writer.add_array("clip.vision.is_deepstack_layers", [False] * c["depth"])
    return _write_tensors(writer, out, path)


def _write_tensors(writer, tensors: dict, path: Path) -> Path:
    """Add `tensors` as F32 and write the GGUF out."""
    import numpy as np

    for name, array in tensors.items():
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
