"""Checkpoint folders as mlx-lm models.

A safetensors folder (Hugging Face or mlx-community, 4- and 8-bit included)
loads through mlx-lm's own loader.  A GGUF folder (see checkpoints/gguf_convert)
loads through MLX's GGUF reader: Q4_0, Q4_1 and Q8_0 arrive as MLX's own
quantized layout (group 32, no loss); names are mapped to Hugging Face's and
llama's permuted q/k rows put back, as the converter does.  A GGUF that MLX's
reader refuses (the K-quants of Q4_K_M and Q5_K_M files) is dequantized to
float32 by the gguf package instead, as the fp32 reference reads it.

Qwen3.5 hybrids load from safetensors folders through mlx-lm's qwen3_5 model
(text-only `qwen3_5_text` folders too); their GGUFs run on the torch engine.

`weights` picks what the layers compute with: "auto" keeps the checkpoint's
format on a GPU; on the CPU it keeps quantized weights as they are, with their
scales and every other array in float32, since MLX's float16 and bfloat16
products are slower there than float32 ones.  Quantized is the fastest on the
CPU too: the built-in Q4_1 model decodes a row in 104 ms kept quantized, 189 ms
dequantized to float32 (MLX 0.32, one thread, this x86 CPU).  "float32" and
"float16" dequantize every layer.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from ...checkpoints import qwen35
from ...checkpoints.errors import CheckpointError
from ...checkpoints.files import gguf_file, read_config, safetensors_files
from ...checkpoints.gguf_convert import dequantized_weights, hf_tensor_name, unpermute_rotary

log = logging.getLogger(__name__)

WEIGHTS = ("auto", "stored", "float32", "float16")


# model_types whose implementation mlx-lm keeps under another name
MODEL_TYPES = {"qwen3_5_text": "qwen3_5"}      # a text-only Qwen3.5: qwen3_5 reads its flat config


def model_classes(config: dict[str, Any]) -> tuple[type, type]:
    """mlx-lm's Model and ModelArgs for the folder's model_type."""
    model_type = config.get("model_type", "?")
    if model_type in MODEL_TYPES:
        model_type = MODEL_TYPES[model_type]
    else:
        from mlx_lm.utils import MODEL_REMAPPING

        model_type = MODEL_REMAPPING.get(model_type, model_type)
    try:
        module = importlib.import_module(f"mlx_lm.models.{model_type}")
    except ImportError:
        raise CheckpointError(f"mlx-lm has no implementation of model_type {model_type!r}") from None
    return module.Model, module.ModelArgs


def _gguf_arrays(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    import mlx.core as mx

    try:
        arrays, meta = mx.load(str(path), return_metadata=True)
    except RuntimeError as exc:                  # a format MLX's reader lacks: K-quants
        log.info("MLX cannot read %s as stored (%s); dequantizing it to float32", path.name, exc)
        return {name: mx.array(w) for name, w in dequantized_weights(path)}
    arch = str(meta.get("general.architecture", ""))
    out = {}
    for name, value in arrays.items():
        stem, _, kind = name.rpartition(".")
        hf = hf_tensor_name(f"{stem}.weight" if kind in ("scales", "biases") else name)
        if hf is None:
            continue
        if kind in ("scales", "biases"):
            hf = hf.removesuffix(".weight") + "." + kind
        if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
            heads = config["num_attention_heads"] if ".attn_q." in name else config["num_key_value_heads"]
            value = mx.array(unpermute_rotary(np.array(value), heads))
        out[hf] = value
    return out


def _quantized_params(weights: dict[str, Any], path: str, module: Any) -> dict[str, int] | bool:
    """The group size and bits of a layer stored quantized (its .scales present), else False."""
    scales = weights.get(f"{path}.scales")
    if scales is None or not hasattr(module, "to_quantized"):
        return False
    columns = module.weight.shape[-1]
    return {"group_size": columns // scales.shape[-1], "bits": weights[f"{path}.weight"].shape[-1] * 32 // columns}


def _dequantized(model: Any, dtype: Any) -> Any:
    """The model with every quantized layer made plain, its weights computed in float32
    (scale and bias widened first, as llama.cpp dequantizes) and then cast to `dtype`."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_unflatten

    plain = []
    for name, module in model.named_modules():
        if not isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            continue
        weight = mx.dequantize(module.weight, module.scales.astype(mx.float32), module.biases.astype(mx.float32),
                               module.group_size, module.bits)
        if isinstance(module, nn.QuantizedEmbedding):
            layer = nn.Embedding(*weight.shape)
        else:
            layer = nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in module)
            if "bias" in module:
                layer.bias = module.bias
        layer.weight = weight
        plain.append((name, layer))
    if plain:
        model.update_modules(tree_unflatten(plain))
    model.set_dtype(dtype)
    return model


def check_hybrid_layers(text: dict[str, Any]) -> None:
    """mlx-lm's Qwen3.5 places gated attention every `full_attention_interval` layers; a
    checkpoint whose layer_types say otherwise would load as another model."""
    kinds = qwen35.HybridArgs.from_config(text).kinds
    interval = text.get("full_attention_interval", 4)
    if kinds != tuple(qwen35.ATTENTION if (i + 1) % interval == 0 else qwen35.DELTANET for i in range(len(kinds))):
        raise CheckpointError(f"layer_types: mlx-lm's Qwen3.5 takes gated attention every {interval} layers; "
                              "this checkpoint's layers differ (serve it with --engine torch)")


def load_model(folder: Path, weights: str = "auto", gpu: bool = False) -> tuple[Any, dict[str, Any]]:
    """(mlx-lm model, config) for `folder`, its layers computing in the format `weights` picks."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.utils import load_model as mlx_lm_load

    if weights not in WEIGHTS:
        raise CheckpointError(f"MLX weights {weights!r}: use one of {', '.join(WEIGHTS)}")
    config = read_config(folder)
    text = qwen35.text_config(config)
    hybrid = (text.get("architectures") or ["?"])[0] in qwen35.ARCHITECTURES
    if hybrid:
        check_hybrid_layers(text)
    if (gguf := gguf_file(folder)) is None:
        safetensors_files(folder)                         # names what is missing, if anything
        model, config = mlx_lm_load(Path(folder), get_model_classes=model_classes)
    elif hybrid:
        raise CheckpointError(f"{gguf.name}: a Qwen3.5 GGUF runs on the torch engine (--engine torch); on MLX give "
                              "the checkpoint's Hugging Face or mlx-community folder")
    else:
        model_cls, args_cls = model_classes(config)
        model = model_cls(args_cls.from_dict(config))
        arrays = model.sanitize(_gguf_arrays(gguf, config))
        nn.quantize(model, class_predicate=lambda p, m: _quantized_params(arrays, p, m))
        model.load_weights(list(arrays.items()), strict=True)
    if weights == "auto" and not gpu:
        model.set_dtype(mx.float32)              # quantized weights kept, their scales widened (no loss)
    elif weights in ("float32", "float16"):
        model = _dequantized(model, mx.float32 if weights == "float32" else mx.float16)
    mx.eval(model.parameters())
    model.eval()
    return model, config
