"""The CPU backend: the native kernels behind the engine's Backend interface."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..backends.host import default_threads, host_budget
from ..backends.rows import Segment, check_rows, check_state_slots
from ..backends.model_args import ModelArgs
from ..checkpoints.errors import UnsupportedModel
from ..checkpoints.files import gguf_file, read_config
from ..checkpoints import qwen35
from . import lib
from . import quant
from .model import NativeModel
from ..vision.positions import row_inputs
from .shard import Shard

log = logging.getLogger(__name__)

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM",
                 *qwen35.ARCHITECTURES)


class NativeRunner:
    device = "cpu"
    dtype = "float32"                # the arithmetic; weights per `weights`, KV per `kv_cache`
    trims_kv = True                  # trim_kv returns the blocks' memory to the system

    def __init__(self, folder: Path, weights: str = "auto", threads: int | None = None, rank: int = 0,
                 ranks: int = 1, kv_cache: str = "fp16") -> None:
        config = qwen35.text_config(read_config(folder))
        arch = (config.get("architectures") or ["?"])[0]
        if arch not in ARCHITECTURES:
            raise UnsupportedModel(f"{folder}: architecture {arch} is not supported on the CPU "
                                   f"(supported: {', '.join(sorted(ARCHITECTURES))})")
        self.args = ModelArgs.from_config(config)
        self.hybrid = hybrid = qwen35.HybridArgs.from_config(config) if arch in qwen35.ARCHITECTURES else None
        self.threads = threads or default_threads()
        lib.ensure_threads(self.threads)
        a = self.args
        shard = None if ranks == 1 else Shard.plan(rank, ranks, heads=a.heads, kv_heads=a.kv_heads,
                                                    head_dim=a.head_dim, hidden=a.hidden_size,
                                                    ffn=a.intermediate_size, vocab=a.vocab_size, hybrid=hybrid,
                                                    tiled=gguf_file(folder) is not None)
        self.model = NativeModel(folder, a, quant.DEFAULT_FLOAT_KIND if weights == "auto" else weights, shard,
                                 hybrid, kv_cache)
        self.model.struct.threads = self.threads
        self.vocab_size = self.args.vocab_size
        self.max_positions = self.args.max_positions
        self.weights = self.model.source
        log.info("loaded %s (%s, %d layers) on the CPU: weights %s (%.1f MiB), kernels %s, %d threads, KV read ahead %s",
                 folder.name, arch, self.args.layers, self.weights, self.model.weight_bytes / 2**20, lib.isa(),
                 self.threads, "on" if lib.load().tf_kv_ahead() else "off")

    def describe(self) -> str:
        kv = " kv int8" if self.model.kv_cache == "int8" else ""
        return f"native cpu {self.weights}{kv} {lib.isa()} x{self.threads}"

    def kv_bytes_per_token(self) -> int:
        return self.model.kv_bytes_per_token()

    def allocate_kv(self, num_blocks: int, block_size: int) -> None:
        self.model.allocate_kv(num_blocks, block_size)
        log.info("KV map: %d blocks of %d positions, up to %.1f MiB (%s, backed as written)", num_blocks,
                 block_size, num_blocks * block_size * self.kv_bytes_per_token() / 2**20, self.model.kv_cache)

    def trim_kv(self, blocks: list[int]) -> None:
        """Give the pages of these unused blocks back to the system."""
        self.model.trim_kv(blocks)

    def segment(self, blocks: list[int], start: int, rows: int, src: int = -1, dst: list[int] | None = None,
                images: tuple = ()) -> Segment:
        return Segment(list(blocks), start, rows, src, dst, images)

    # -- a hybrid's deltanet states (engine/states.py) -------------------------------------
    def state_bytes(self) -> int:
        return self.model.state_bytes()

    def allocate_state(self, slots: int) -> None:
        self.model.allocate_state(slots)

    def copy_state(self, src: int, dst: int) -> None:
        self.model.copy_state(src, dst)

    def trim_state(self, slots: list[int]) -> None:
        """Give the pages of these unused slots back to the system."""
        self.model.trim_state(slots)

    def free_memory(self) -> int:
        return host_budget()

    def forward(self, tokens: list[int], segments: list[Segment], out_rows: list[int]) -> np.ndarray:
        """Run `tokens` (segments' rows, in order); fp32 logits [len(out_rows), vocab] (on
        one of several ranks, its own vocabulary columns)."""
        arrays, images = self.inputs(tokens, segments, out_rows)
        return self.model.forward(*arrays, **images)

    def inputs(self, tokens: list[int], segments: list[Segment], out_rows: list[int]
               ) -> tuple[tuple[np.ndarray, ...], dict[str, np.ndarray]]:
        """A forward's inputs, checked: the int32 arrays (rows, then a hybrid's state slots)
        and the image inputs ({} without images), as NativeModel.forward takes them."""
        return self.rows(tokens, segments, out_rows) + self.states(segments), self.image_inputs(segments)

    def image_inputs(self, segments: list[Segment]) -> dict[str, np.ndarray]:
        """The rows' image embeddings and M-RoPE positions, when a segment has images."""
        if not any(seg.images for seg in segments):
            return {}
        if not self.model.struct.mrope[0]:
            raise ValueError("this model takes no images")
        rows, parts, mrope, taken = [], [], [], 0
        for seg in segments:
            embed_row, embeds, positions = row_inputs(seg.images, seg.start, seg.rows)
            rows.append(np.where(embed_row >= 0, embed_row + taken, -1))
            if len(embeds):
                parts.append(embeds)
                taken += len(embeds)
            mrope.append(positions)
        hidden = self.args.hidden_size
        embeds = np.concatenate(parts) if parts else np.zeros((0, hidden), np.float32)
        if embeds.shape[1] != hidden:
            raise ValueError(f"image embeddings of width {embeds.shape[1]}, the model's is {hidden}")
        return {"embed_row": np.concatenate(rows).astype(np.int32), "embeds": np.ascontiguousarray(embeds),
                "mrope": np.ascontiguousarray(np.concatenate(mrope), dtype=np.int32)}

    def states(self, segments: list[Segment]) -> tuple[np.ndarray, np.ndarray] | tuple[()]:
        """Each row's source and destination state slots (a hybrid's), checked; row j > 0 of a
        segment reads what row j - 1 wrote."""
        if not self.state_bytes():
            return ()
        src, dst = [], []
        for seg in segments:
            check_state_slots(seg, self.model.state_slots)
            src += [seg.src, *seg.dst[:-1]]
            dst += seg.dst
        return np.asarray(src, np.int32), np.asarray(dst, np.int32)

    def rows(self, tokens: list[int], segments: list[Segment], out_rows: list[int]) -> Rows:
        """A forward's int32 arrays (tokens, pos, tab_off, tables, out_rows), checked."""
        check_rows(tokens, segments, self.model.struct.block_size, self.model.num_blocks, self.max_positions,
                   self.vocab_size)
        tables, pos, tab_off = [], [], []
        for seg in segments:
            tab_off += [len(tables)] * seg.rows
            pos += range(seg.start, seg.start + seg.rows)
            tables += seg.table
        i32 = np.int32
        return (np.asarray(tokens, i32), np.asarray(pos, i32), np.asarray(tab_off, i32),
                np.asarray(tables or [0], i32), np.asarray(out_rows, i32))


Rows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
