"""The torch backend: loads a checkpoint folder and runs forwards on CUDA or CPU."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ...checkpoints.errors import UnsupportedModel
from ...checkpoints.files import gguf_file, iter_weights, read_config
from ...checkpoints import qwen35
from ..host import device_kind, host_budget
from ..rows import check_state_slots
from .kv import KVPool, Segment
from .models import FAMILIES

log = logging.getLogger(__name__)

DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32}


def pick_device(name: str) -> torch.device:
    return torch.device(device_kind(name) if name == "auto" else name)


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise UnsupportedModel(f"unknown dtype {name!r}; use bfloat16 or float32")
    return DTYPES[name]


class TorchRunner:
    def __init__(self, folder: Path, dtype: str = "auto", device: str = "auto") -> None:
        config = qwen35.text_config(read_config(folder))
        arch = (config.get("architectures") or ["?"])[0]
        family = FAMILIES.get(arch)
        if family is None:
            raise UnsupportedModel(f"{folder}: architecture {arch} is not supported "
                                   f"(supported: {', '.join(sorted(FAMILIES))})")
        self.device = pick_device(device)
        self.dtype = pick_dtype(dtype, self.device)
        self.args = family.ModelArgs.from_config(config)
        self.hybrid = None
        if arch in qwen35.ARCHITECTURES:
            if gguf_file(folder):
                raise UnsupportedModel(f"{folder.name}: a Qwen3.5 GGUF runs on the CPU engine; on torch give "
                                       "its safetensors folder")
            self.hybrid = qwen35.HybridArgs.from_config(config)
        extra = (self.hybrid,) if self.hybrid else ()
        self.model = family.Model(self.args, iter_weights(folder), self.dtype, self.device, *extra)
        self.attention_layers = self.hybrid.kinds.count(qwen35.ATTENTION) if self.hybrid else self.args.layers
        self.vocab_size = self.args.vocab_size
        self.max_positions = self.args.max_positions
        log.info("loaded %s (%s, %d layers) on %s in %s", folder.name, arch, self.args.layers,
                 self.device, str(self.dtype).removeprefix("torch."))

    def describe(self) -> str:
        return f"torch {self.device.type} {str(self.dtype).removeprefix('torch.')}"

    def kv_bytes_per_token(self) -> int:
        """Bytes of keys and values one position takes across all layers."""
        a = self.args
        return 2 * self.attention_layers * a.kv_heads * a.head_dim * torch.finfo(self.dtype).bits // 8

    def allocate_kv(self, num_blocks: int, block_size: int) -> None:
        a = self.args
        self.kv = KVPool(self.attention_layers, a.kv_heads, a.head_dim, num_blocks, block_size, self.dtype,
                         self.device)
        log.info("KV pool: %d blocks of %d positions, %.1f MiB", num_blocks, block_size, self.kv.nbytes() / 2**20)

    def trim_kv(self, blocks: list[int]) -> None:
        """The pool is allocated whole (on CUDA, memory the server keeps): nothing to return."""

    def segment(self, blocks: list[int], start: int, rows: int, src: int = -1, dst: list[int] | None = None,
                images: tuple = ()) -> Segment:
        if images:
            raise ValueError("images run on the CPU engine")
        seg = Segment(torch.tensor(blocks, dtype=torch.int64, device=self.device), start, rows, src, dst)
        if self.hybrid:
            states = self.model.states
            check_state_slots(seg, states.conv.shape[0] if states is not None else None)
        return seg

    # -- a hybrid's deltanet states (engine/states.py) -------------------------------------
    def state_bytes(self) -> int:
        return 4 * self.hybrid.state_floats if self.hybrid else 0

    def allocate_state(self, slots: int) -> None:
        from .models.qwen3_5 import States

        self.model.states = States(self.hybrid, slots, self.device)

    def copy_state(self, src: int, dst: int) -> None:
        states = self.model.states
        states.conv[dst], states.rule[dst] = states.conv[src], states.rule[src]

    def trim_state(self, slots: list[int]) -> None:
        """The slots are allocated whole (on CUDA, memory the server keeps): nothing to return."""

    def free_memory(self) -> int:
        """Bytes free for the KV pool (see engine/capacity.py)."""
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            return max(0, free - total // 10)
        return host_budget()

    @staticmethod
    def thread_mode():
        """The mode the engine thread runs this backend's calls in: no autograd."""
        return torch.inference_mode()

    def forward(self, tokens: list[int], segments: list[Segment], out_rows: list[int]) -> torch.Tensor:
        """Run `tokens` (segments' rows, in order); fp32 logits [len(out_rows), vocab] on the CPU."""
        t = torch.tensor(tokens, dtype=torch.int64, device=self.device)
        rows = torch.tensor(out_rows, dtype=torch.int64, device=self.device)
        return self.model.forward(t, segments, self.kv, rows).cpu()
