"""The Qwen3.5 hybrids' checkpoints: their config, and their Hugging Face weights in the
form both engines read (native/model.py, backends/torch/models/qwen3_5.py).

In every `full_attention_interval` layers, the last is gated attention (q_proj
gives each head's query and its output gate side by side; q and k RMS-normed;
rope on the leading `partial_rotary_factor` of each head's dims) and the others
are Gated DeltaNet linear attention (tf_deltanet.c).  For text, M-RoPE's three
position components are equal, so it is plain rope on those dims.  The hybrid's
RMSNorms scale by 1 + weight ("zero-centered"), except the deltanet's gated norm.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .errors import CheckpointError

ARCHITECTURES = ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration")
ATTENTION, DELTANET = 0, 1      # a layer's kind (as tf_kernels.h numbers them)
_CENTERED = ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight",
             "self_attn.k_norm.weight")


@dataclass(frozen=True, slots=True)
class HybridArgs:
    kinds: tuple[int, ...]          # per layer: ATTENTION or DELTANET
    rot_dim: int                    # the leading dims of a head that rope turns
    k_heads: int
    v_heads: int
    k_dim: int
    v_dim: int
    conv_k: int
    mrope: tuple[int, int, int] = (0, 0, 0)    # M-RoPE's sections (t, h, w) of the rotary frequencies

    @property
    def conv_dim(self) -> int:
        return 2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim

    @property
    def deltanet_layers(self) -> int:
        return self.kinds.count(DELTANET)

    @property
    def state_floats(self) -> int:
        """fp32 values of one sequence's state over every deltanet layer (a slot)."""
        return self.deltanet_layers * ((self.conv_k - 1) * self.conv_dim + self.v_heads * self.k_dim * self.v_dim)

    @classmethod
    def from_config(cls, c: dict) -> HybridArgs:
        layers = c["num_hidden_layers"]
        types = c.get("layer_types") or [
            "full_attention" if (i + 1) % c.get("full_attention_interval", 4) == 0 else "linear_attention"
            for i in range(layers)]
        unknown = set(types) - {"full_attention", "linear_attention"}
        if unknown or len(types) != layers:
            raise CheckpointError(f"layer_types {sorted(unknown) or types}: expected {layers} of "
                                  "full_attention / linear_attention")
        head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        rope = c.get("rope_parameters") or {}
        factor = rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
        args = cls(kinds=tuple(ATTENTION if t == "full_attention" else DELTANET for t in types),
                   rot_dim=int(head_dim * factor), k_heads=c["linear_num_key_heads"],
                   v_heads=c["linear_num_value_heads"], k_dim=c["linear_key_head_dim"],
                   v_dim=c["linear_value_head_dim"], conv_k=c.get("linear_conv_kernel_dim", 4),
                   mrope=tuple(int(x) for x in (rope.get("mrope_section") or [head_dim * factor // 2, 0, 0])[:3]))
        if rope.get("mrope_section") and rope.get("mrope_interleaved") is False:
            raise CheckpointError("this checkpoint's M-RoPE sections are not interleaved; the CPU engine takes "
                                  "Qwen3.5's interleaved layout")
        if args.rot_dim % 2 or args.k_dim % 8 or args.v_dim % 8 or args.v_heads % args.k_heads:
            raise CheckpointError(f"the CPU engine takes an even rotary dim ({args.rot_dim}), key and value "
                                  f"head dims in multiples of 8 ({args.k_dim}, {args.v_dim}) and value heads "
                                  f"in whole groups per key head ({args.v_heads}, {args.k_heads})")
        return args


def is_hybrid(folder) -> bool:
    """Whether the checkpoint in `folder` is a Qwen3.5 hybrid (by its config)."""
    from .files import read_config

    return (read_config(folder).get("architectures") or ["?"])[0] in ARCHITECTURES


def text_config(config: dict) -> dict:
    """The language model's config: a multimodal checkpoint's `text_config` (with the
    checkpoint's architectures), else the config itself."""
    text = config.get("text_config")
    if not isinstance(text, dict):
        return config
    return {**text, "architectures": config.get("architectures", []),
            "tie_word_embeddings": config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))}


def split_q_gate(rows: np.ndarray, heads: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """A gated-attention q_proj's rows (each head's queries, then its output gate) as the
    queries of every head and the gates of every head.  Rows are independent, so this works
    on a GGUF's raw blocks as well as on floats."""
    both = rows.reshape(heads, 2, head_dim, -1)
    return (np.ascontiguousarray(both[:, 0].reshape(heads * head_dim, -1)),
            np.ascontiguousarray(both[:, 1].reshape(heads * head_dim, -1)))


def hf_weights(tensors: Iterator[tuple[str, np.ndarray]], heads: int, head_dim: int
               ) -> Iterator[tuple[str, np.ndarray]]:
    """A Qwen3.5 safetensors checkpoint's text weights under the names the native model
    loads: the multimodal prefix dropped; each q_proj split into the queries and their
    gates (`self_attn.q_gate`); zero-centered norms as 1 + weight; A_log as the decay
    rate -exp(A_log) (`linear_attn.decay_a`)."""
    for name, array in tensors:
        if name.startswith("model.language_model."):
            name = "model." + name[len("model.language_model."):]
        if name.startswith(("model.visual.", "mtp.", "model.mtp.")):
            continue
        if name.endswith("self_attn.q_proj.weight"):
            queries, gates = split_q_gate(array, heads, head_dim)
            yield name, queries
            yield name.replace("q_proj", "q_gate"), gates
        elif name.endswith(_CENTERED) or name == "model.norm.weight":
            yield name, (array.astype(np.float64) + 1.0).astype(np.float32)
        elif name.endswith("linear_attn.A_log"):
            yield name.replace("A_log", "decay_a"), (-np.exp(array.astype(np.float64))).astype(np.float32)
        else:
            yield name, array
