"""Turn a GGUF file (llama.cpp's format) into a Hugging Face style folder.

The output folder holds ``config.json``, ``generation_config.json``,
``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja`` and
``model.gguf``: the GGUF itself (a symbolic link to the user's file, or the
file moved in), whose weights load as they are stored, in their own
quantized formats (``iter_gguf_weights``), never as a float32 copy.

Notes on the format, checked against transformers' own GGUF loader:

- GGUF lists a tensor's dimensions fastest-first (``ne0`` = columns), the
  reverse of torch. The raw data is row-major, so reading it as the reversed
  shape gives the Hugging Face ``[out_features, in_features]`` orientation.
- llama.cpp's converter permutes the rows of ``attn_q`` / ``attn_k`` for the
  ``llama`` architecture only (its rotary kernel pairs adjacent dimensions;
  Hugging Face pairs the two halves of each head). We undo it here. ``qwen2``
  and ``qwen3`` are written unpermuted.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .child import child_main, run_module
from .errors import CheckpointError
from .files import GGUF_FILE

log = logging.getLogger(__name__)
MODULE = "tensorfold.checkpoints.gguf_convert"
CONVERT_TIMEOUT = 900.0

ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen35": "Qwen3_5ForCausalLM",
}
_DEFAULT_ROPE_THETA = {"llama": 10000.0, "qwen2": 1000000.0, "qwen3": 1000000.0, "qwen35": 10000000.0}

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    # qwen35 (llama.cpp's layout: zero-centered norms stored as 1 + weight, ssm_a as
    # -exp(A_log), the deltanet's value heads in tiled order; checkpoints/qwen35.py)
    "post_attention_norm": "post_attention_layernorm",
    "attn_qkv": "linear_attn.in_proj_qkv",
    "attn_gate": "linear_attn.in_proj_z",
    "ssm_beta": "linear_attn.in_proj_b",
    "ssm_alpha": "linear_attn.in_proj_a",
    "ssm_out": "linear_attn.out_proj",
    "ssm_conv1d": "linear_attn.conv1d",
    "ssm_norm": "linear_attn.norm",
}
_BARE_NAMES = {"ssm_a": "linear_attn.decay_a", "ssm_dt.bias": "linear_attn.dt_bias"}   # qwen35, no suffix
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_0-9]+)\.(weight|bias)$")
_BARE_RE = re.compile(r"^blk\.(\d+)\.(ssm_a|ssm_dt\.bias)$")
# Big arrays we never need as Python objects here.
_SKIP_FIELDS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")


def read_metadata(reader: Any) -> dict[str, Any]:
    """Scalar and small-array metadata of an open ``gguf.GGUFReader``."""
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key in _SKIP_FIELDS or key.startswith("GGUF."):
            continue
        try:
            meta[key] = field.contents()
        except Exception as exc:  # a field type this gguf version cannot decode
            log.debug("skipping GGUF field %s: %s", key, exc)
    return meta


def hf_tensor_name(name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor, or None for tensors we drop."""
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    if name == "rope_freqs.weight":
        return None  # folded into rope_scaling in the config
    if match := _BARE_RE.match(name):
        return f"model.layers.{match.group(1)}.{_BARE_NAMES[match.group(2)]}"
    match = _BLOCK_RE.match(name)
    if match and match.group(2) in _BLOCK_NAMES:
        layer, part, kind = match.groups()
        return f"model.layers.{layer}.{_BLOCK_NAMES[part]}.{kind}"
    raise CheckpointError(f"GGUF tensor {name!r} has no Hugging Face counterpart; this model is not supported")


def unpermute_rotary(rows: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (per head: interleaved -> halves)."""
    head_dim = rows.shape[0] // n_head
    split = rows.reshape(n_head, head_dim // 2, 2, *rows.shape[1:])
    return np.ascontiguousarray(split.swapaxes(1, 2)).reshape(rows.shape)


def _f32(value: float) -> float:
    """A float32 metadata value as its shortest decimal (9.99999e-06 -> 1e-05)."""
    return float(str(np.float32(value)))


def _llama3_rope(
    meta: dict[str, Any], arch: str, rope_freqs: np.ndarray, theta: float, head_dim: int
) -> dict[str, Any] | None:
    """Recognise llama 3.x rope scaling from the ``rope_freqs`` factors (llama.cpp stores only those)."""
    dims = rope_freqs.shape[0]
    inv_freq = 1.0 / theta ** (np.arange(0, 2 * dims, 2, dtype=np.float64) / (2 * dims))
    original = int(meta.get(f"{arch}.rope.scaling.original_context_length", 8192))
    for factor in (8.0, 16.0, 32.0, 4.0, 2.0):
        low, high = 1.0, 4.0
        wavelen = 2 * math.pi / inv_freq
        smooth = (original / wavelen - low) / (high - low)
        scaled = np.where(wavelen > original / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= original / low) & (wavelen >= original / high)
        scaled = np.where(mid, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)
        if np.allclose(inv_freq / scaled, rope_freqs, rtol=1e-3):
            return {
                "rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                "high_freq_factor": high, "original_max_position_embeddings": original,
            }
    log.warning("rope_freqs in this GGUF do not match llama3 rope scaling; ignoring them")
    return None


def build_config(
    meta: dict[str, Any], shapes: dict[str, tuple[int, ...]], rope_freqs: np.ndarray | None = None
) -> dict[str, Any]:
    """The Hugging Face ``config.json`` for a GGUF's metadata and tensor shapes (torch order)."""
    arch = str(meta.get("general.architecture", ""))
    if arch not in ARCHITECTURES:
        raise CheckpointError(
            f"GGUF architecture {arch!r} is not supported (supported: {', '.join(sorted(ARCHITECTURES))})"
        )

    def key(name: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            raise CheckpointError(f"GGUF metadata lacks {arch}.{name}")
        return value

    if "token_embd.weight" not in shapes:
        raise CheckpointError("GGUF has no token_embd.weight tensor")
    vocab_size, hidden = shapes["token_embd.weight"]
    heads = int(key("attention.head_count"))
    kv_heads = int(key("attention.head_count_kv", heads))
    head_dim = int(meta.get(f"{arch}.attention.key_length", hidden // heads))
    theta = _f32(key("rope.freq_base", _DEFAULT_ROPE_THETA[arch]))
    config: dict[str, Any] = {
        "architectures": [ARCHITECTURES[arch]],
        "model_type": arch,
        "hidden_size": int(key("embedding_length", hidden)),
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": _f32(key("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": theta,
        "max_position_embeddings": int(key("context_length", 2048)),
        "vocab_size": int(vocab_size),
        "tie_word_embeddings": "output.weight" not in shapes,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": "float32",
    }
    if arch == "llama":
        config["attention_bias"] = "blk.0.attn_q.bias" in shapes
        config["mlp_bias"] = False
    elif arch == "qwen35":
        config.update(_qwen35_config(key, head_dim, theta))
    elif arch == "qwen3":
        config["attention_bias"] = "blk.0.attn_q.bias" in shapes
    else:
        config["use_sliding_window"] = False
    ids = (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"), ("padding_token_id", "pad_token_id"))
    for name, hf in ids:
        value = meta.get(f"tokenizer.ggml.{name}")
        if value is not None:
            config[hf] = int(value)
    scaling = meta.get(f"{arch}.rope.scaling.type")
    factor = meta.get(f"{arch}.rope.scaling.factor")
    if scaling in ("linear", "yarn") and factor:
        config["rope_scaling"] = {"rope_type": scaling, "type": scaling, "factor": _f32(factor)}
        if scaling == "yarn":
            config["rope_scaling"]["original_max_position_embeddings"] = int(
                key("rope.scaling.original_context_length", config["max_position_embeddings"])
            )
    elif scaling not in (None, "none"):
        log.warning("GGUF rope scaling %r is not supported; ignoring it", scaling)
    if rope_freqs is not None and arch == "llama":
        llama3 = _llama3_rope(meta, arch, rope_freqs, theta, head_dim)
        if llama3:
            config["rope_scaling"] = llama3
    return config


def _qwen35_config(key: Any, head_dim: int, theta: float) -> dict[str, Any]:
    """A qwen35 GGUF's hybrid layout: which layers are deltanet (recurrent) ones, their
    sizes, and the partial rotary dims (M-RoPE's sections for text are plain rope)."""
    layers = int(key("block_count"))
    interval = int(key("full_attention_interval", 4))
    v_heads = int(key("ssm.time_step_rank"))
    try:
        recurrent = list(key("attention.recurrent_layers"))
    except CheckpointError:
        recurrent = [(i + 1) % interval != 0 for i in range(layers)]
    sections = list(key("rope.dimension_sections", [11, 11, 10, 0]))
    return {
        "model_type": "qwen3_5_text",
        "layer_types": ["linear_attention" if r else "full_attention" for r in recurrent[:layers]],
        "full_attention_interval": interval,
        "linear_num_key_heads": int(key("ssm.group_count")),
        "linear_num_value_heads": v_heads,
        "linear_key_head_dim": int(key("ssm.state_size")),
        "linear_value_head_dim": int(key("ssm.inner_size")) // v_heads,
        "linear_conv_kernel_dim": int(key("ssm.conv_kernel")),
        "attention_bias": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta,
                            "partial_rotary_factor": int(key("rope.dimension_count")) / head_dim,
                            "mrope_section": sections[:3], "mrope_interleaved": True},
    }


def generation_config(meta: dict[str, Any]) -> dict[str, Any]:
    """``generation_config.json``: bos, pad and every end-of-turn id the GGUF names."""
    eos: list[int] = []
    for name in ("eos_token_id", "eot_token_id", "eom_token_id"):
        value = meta.get(f"tokenizer.ggml.{name}")
        if value is not None and int(value) not in eos:
            eos.append(int(value))
    out: dict[str, Any] = {}
    if meta.get("tokenizer.ggml.bos_token_id") is not None:
        out["bos_token_id"] = int(meta["tokenizer.ggml.bos_token_id"])
    if eos:
        out["eos_token_id"] = eos[0] if len(eos) == 1 else eos
    if meta.get("tokenizer.ggml.padding_token_id") is not None:
        out["pad_token_id"] = int(meta["tokenizer.ggml.padding_token_id"])
    return out


def _dequantize(data: np.ndarray, qtype: Any, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """GGUF tensor data as float32 in torch orientation ``shape``."""
    from gguf.quants import dequantize

    try:
        array = dequantize(np.asarray(data), qtype)
    except NotImplementedError:
        kind = getattr(qtype, "name", qtype)
        raise CheckpointError(
            f"GGUF tensor {name} is stored as {kind}, which this gguf package cannot dequantize; "
            "use a GGUF with a common quantization (F16, Q8_0, Q4_K_M, ...)"
        ) from None
    return np.asarray(array, dtype=np.float32).reshape(shape)


def _dequantized(tensor: Any) -> np.ndarray:
    """A GGUF tensor as float32 in torch orientation (reversed GGUF dims)."""
    return _dequantize(tensor.data, tensor.tensor_type, tensor.name, tuple(int(d) for d in reversed(tensor.shape)))


def iter_gguf_weights(gguf_path: str | Path, index: tuple[dict[str, Any], list[Any]] | None = None
                      ) -> Iterator[tuple[str, Any, np.ndarray, tuple[int, ...]]]:
    """Yield ``(hf_name, ggml_type, data, shape)`` for every weight of the GGUF, as stored.

    ``data`` is what ``gguf.GGUFReader`` would map (read by gguf_index): raw ggml blocks (uint8, one row
    of blocks per output row) for quantized types, floats otherwise; ``shape``
    is the torch shape.  llama's q/k rows are put back in Hugging Face order
    (rows are independent, so this works on raw blocks too).  `index`: the file's
    gguf_index.read_index, where the caller has read it already."""
    from .gguf_index import read_index

    meta, tensors = index or read_index(gguf_path)
    arch = str(meta.get("general.architecture", ""))
    for tensor in tensors:
        name = hf_tensor_name(tensor.name)
        if name is None:
            continue
        shape = tuple(int(d) for d in reversed(tensor.shape))
        data = tensor.data
        if arch == "llama" and (".attn_q." in tensor.name or ".attn_k." in tensor.name):
            key = "attention.head_count" if ".attn_q." in tensor.name else "attention.head_count_kv"
            n_head = int(meta.get(f"{arch}.{key}") or meta[f"{arch}.attention.head_count"])
            data = unpermute_rotary(np.asarray(data), n_head)
        yield name, tensor.tensor_type, data, shape


def dequantized_weights(gguf_path: str | Path) -> Iterator[tuple[str, np.ndarray]]:
    """The GGUF's weights as float32 arrays in torch orientation (the fp32 reference, and CUDA)."""
    for name, qtype, data, shape in iter_gguf_weights(gguf_path):
        yield name, _dequantize(data, qtype, name, shape)


def convert_gguf_apart(gguf_path: Path, out_dir: Path, move: bool = False) -> Path:
    """`convert_gguf` in a child process: its tokenizer export imports transformers and
    torch (about 330 MiB that a server converting its model at start kept all day)."""
    log.info("converting %s into %s", gguf_path.name, out_dir)
    run_module(MODULE, [str(gguf_path), str(out_dir), *(["--move"] if move else [])],
               f"could not convert {gguf_path}", CONVERT_TIMEOUT)
    return out_dir


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, move: bool = False) -> Path:
    """Write a Hugging Face style folder for ``gguf_path`` into ``out_dir`` and return it.

    ``model.gguf`` in it links to ``gguf_path`` (or is the file itself, moved
    in, when ``move``).  ``out_dir`` is created if needed; callers that want
    the result to appear atomically build into a temporary folder (see
    ``store.build_atomically``).
    """
    from gguf import GGUFReader

    from .gguf_tokenizer import export_tokenizer

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    try:
        reader = GGUFReader(str(gguf_path))
    except Exception as exc:
        raise CheckpointError(f"{gguf_path} is not a readable GGUF file: {exc}") from exc
    meta = read_metadata(reader)
    tensors = {t.name: t for t in reader.tensors}
    shapes = {name: tuple(int(d) for d in reversed(t.shape)) for name, t in tensors.items()}
    rope_freqs = _dequantized(tensors["rope_freqs.weight"]) if "rope_freqs.weight" in tensors else None
    config = build_config(meta, shapes, rope_freqs)
    names = {hf for name in tensors if (hf := hf_tensor_name(name)) is not None}
    for required in ("model.embed_tokens.weight", "model.norm.weight"):
        if required not in names:
            raise CheckpointError(f"GGUF lacks the tensor for {required}; the file is incomplete")
    if not any(n.endswith(("self_attn.q_proj.weight", "linear_attn.in_proj_qkv.weight")) for n in names):
        raise CheckpointError("GGUF has no attention or deltanet layers; the file is incomplete")
    out_dir.mkdir(parents=True, exist_ok=True)
    log.info("reading %s (%s, %d tensors) into %s", gguf_path.name, config["model_type"], len(tensors), out_dir)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out_dir / "generation_config.json").write_text(
        json.dumps(generation_config(meta), indent=2) + "\n", encoding="utf-8"
    )
    export_tokenizer(gguf_path, out_dir, meta)
    del reader, tensors
    target = out_dir / GGUF_FILE
    if move:
        os.replace(gguf_path, target)
    else:
        os.symlink(gguf_path.resolve(), target)
    return out_dir


if __name__ == "__main__":
    child_main(lambda argv: str(convert_gguf(argv[0], argv[1], move="--move" in argv[2:])))
