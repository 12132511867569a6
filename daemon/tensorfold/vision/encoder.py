"""A Qwen3.5 checkpoint's vision tower: images to the embeddings its language model
reads at the image's positions.

The tower and its image processor come from transformers (a dependency): the
processor resizes by the checkpoint's min/max pixel rule and cuts patches; the
tower (transformers' Qwen3_5VisionModel with the checkpoint's `model.visual.*`
weights) turns them into one embedding per merged 2x2 patch.  Each image runs
alone, in fp32, on one torch thread, so an image's embeddings have the same bits
whatever else the server does; they are cached by the image's digest (up to
CACHE_BYTES of them, least recently used first).  A GGUF model's tower comes from
llama.cpp's mmproj file (`from_mmproj`).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..checkpoints.errors import CheckpointError
from ..checkpoints.files import iter_safetensors, read_config

if TYPE_CHECKING:
    from .source import Image

CACHE_BYTES = 256 << 20          # the embeddings kept for pictures that may come again


@dataclass(frozen=True, slots=True)
class Encoded:
    """An image as the language model takes it: `tokens` embeddings [tokens, hidden] on a
    grid of (t, h, w) merged patches (t * h * w == tokens)."""

    digest: str
    embeds: np.ndarray
    grid: tuple[int, int, int]

    @property
    def tokens(self) -> int:
        return int(self.embeds.shape[0])


def has_vision_tower(folder: Path) -> bool:
    return isinstance(read_config(folder).get("vision_config"), dict)


def mmproj_beside(folder: Path) -> Path | None:
    """For a model served from a GGUF: the one `mmproj*.gguf` in the GGUF file's own folder
    (as model repositories ship the tower beside the weights), if there is exactly one."""
    from ..checkpoints.files import gguf_file

    source = gguf_file(folder)
    if source is None:
        return None
    found = sorted(Path(source).resolve().parent.glob("mmproj*.gguf"))
    return found[0] if len(found) == 1 else None


# the Qwen3.5 image processor's defaults (a GGUF's mmproj does not carry them)
QWEN35_PROCESSOR = {"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "image_mean": [0.5, 0.5, 0.5],
                    "image_std": [0.5, 0.5, 0.5]}
_MMPROJ_NAMES = {"attn_qkv": "attn.qkv", "attn_out": "attn.proj", "ffn_up": "mlp.linear_fc1",
                 "ffn_down": "mlp.linear_fc2", "ln1": "norm1", "ln2": "norm2"}


class VisionEncoder:
    def __init__(self, vision_config: dict, weights: dict[str, torch.Tensor], processor: dict,
                 token_ids: tuple[int, int, int], where: str) -> None:
        """`weights`: the tower's under transformers' names (without `model.visual.`);
        `token_ids`: the image pad, vision start and vision end tokens."""
        from transformers import Qwen2VLImageProcessorPil, Qwen3_5VisionConfig
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel

        self.image_token_id, self.start_token_id, self.end_token_id = token_ids
        vision = Qwen3_5VisionConfig(**vision_config)
        self.merge = vision.spatial_merge_size
        with torch.device("cpu"):
            self.tower = Qwen3_5VisionModel(vision).to(torch.float32).eval()
        missing, unexpected = self.tower.load_state_dict(weights, strict=False)
        if missing or unexpected:
            raise CheckpointError(f"{where}: the vision tower's weights do not fit its config "
                                  f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
        settings = {k: v for k, v in processor.items() if k not in ("image_processor_type", "processor_class")}
        settings.setdefault("patch_size", vision.patch_size)
        settings.setdefault("temporal_patch_size", vision.temporal_patch_size)
        settings.setdefault("merge_size", self.merge)
        self.processor = Qwen2VLImageProcessorPil(**settings)
        self._cache: OrderedDict[str, Encoded] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()

    @classmethod
    def from_folder(cls, folder: Path) -> VisionEncoder:
        """A Hugging Face folder's tower: config.json's vision_config, the model.visual.*
        weights and preprocessor_config.json."""
        config = read_config(folder)
        if not isinstance(config.get("vision_config"), dict):
            raise CheckpointError(f"{folder.name} has no vision tower (no vision_config in its config.json)")
        weights = {name[len("model.visual."):]: t.to(torch.float32) for name, t in iter_safetensors(folder)
                   if name.startswith("model.visual.")}
        pre = folder / "preprocessor_config.json"
        processor = json.loads(pre.read_text()) if pre.is_file() else QWEN35_PROCESSOR
        ids = (int(config.get("image_token_id", 248056)), int(config.get("vision_start_token_id", 248053)),
               int(config.get("vision_end_token_id", 248054)))
        return cls(config["vision_config"], weights, processor, ids, folder.name)

    @classmethod
    def from_mmproj(cls, path: Path, tokenizer: Any) -> VisionEncoder:
        """llama.cpp's mmproj GGUF of a Qwen3.5 tower (projector qwen3vl_merger): the same
        tensors under llama.cpp's names, the patch conv split in its two time steps; the
        token ids from the model's tokenizer; the processor's pixel rule Qwen3.5's."""
        from gguf import GGUFReader

        from ..checkpoints.gguf_convert import read_metadata

        try:
            reader = GGUFReader(str(path))
        except Exception as exc:
            raise CheckpointError(f"--mmproj {path}: not a readable GGUF file: {exc}") from exc
        meta = read_metadata(reader)
        if meta.get("clip.projector_type") != "qwen3vl_merger":
            raise CheckpointError(f"--mmproj {path.name}: projector {meta.get('clip.projector_type')!r}; a Qwen3.5 "
                                  "vision tower's mmproj has qwen3vl_merger")
        if any(meta.get("clip.vision.is_deepstack_layers") or []):
            raise CheckpointError(f"--mmproj {path.name}: a tower with deepstack layers (Qwen3-VL) is not a Qwen3.5 one")
        t = {x.name: torch.from_numpy(np.array(x.data, dtype=np.float32).reshape([int(d) for d in reversed(x.shape)]))
             for x in reader.tensors}
        weights = {"patch_embed.proj.weight": torch.stack([t["v.patch_embd.weight"], t["v.patch_embd.weight.1"]], 2),
                   "patch_embed.proj.bias": t["v.patch_embd.bias"], "pos_embed.weight": t["v.position_embd.weight"],
                   "merger.norm.weight": t["v.post_ln.weight"], "merger.norm.bias": t["v.post_ln.bias"],
                   "merger.linear_fc1.weight": t["mm.0.weight"], "merger.linear_fc1.bias": t["mm.0.bias"],
                   "merger.linear_fc2.weight": t["mm.2.weight"], "merger.linear_fc2.bias": t["mm.2.bias"]}
        for name, tensor in t.items():
            parts = name.split(".")
            if parts[:2] == ["v", "blk"] and parts[3] in _MMPROJ_NAMES:
                weights[f"blocks.{parts[2]}.{_MMPROJ_NAMES[parts[3]]}.{parts[4]}"] = tensor
        vision = {"depth": int(meta["clip.vision.block_count"]), "hidden_size": int(meta["clip.vision.embedding_length"]),
                  "intermediate_size": int(meta["clip.vision.feed_forward_length"]),
                  "num_heads": int(meta["clip.vision.attention.head_count"]),
                  "patch_size": int(meta["clip.vision.patch_size"]), "temporal_patch_size": 2,
                  "spatial_merge_size": int(meta.get("clip.vision.spatial_merge_size", 2)),
                  "out_hidden_size": int(meta["clip.vision.projection_dim"]),
                  "num_position_embeddings": int(t["v.position_embd.weight"].shape[0])}
        processor = {**QWEN35_PROCESSOR, "image_mean": list(meta.get("clip.vision.image_mean", [0.5] * 3)),
                     "image_std": list(meta.get("clip.vision.image_std", [0.5] * 3))}
        ids = tuple(tokenizer.convert_tokens_to_ids(tok) for tok in ("<|image_pad|>", "<|vision_start|>",
                                                                      "<|vision_end|>"))
        if any(i is None or i == tokenizer.unk_token_id for i in ids):
            raise CheckpointError("--mmproj: the model's tokenizer lacks Qwen's vision tokens "
                                  "(<|image_pad|>, <|vision_start|>, <|vision_end|>)")
        return cls(vision, weights, processor, ids, path.name)

    @property
    def pixel_limits(self) -> tuple[int, int]:
        """The processor's (min, max) pixels after resizing."""
        size = self.processor.size
        return int(size["shortest_edge"]), int(size["longest_edge"])

    def encode(self, image: Image) -> Encoded:
        """The image's embeddings (from the cache when the same picture came before)."""
        with self._lock:
            if (hit := self._cache.get(image.digest)) is not None:
                self._cache.move_to_end(image.digest)
                return hit
            encoded = self._run(image)
            self._cache[image.digest] = encoded
            self._cached_bytes += encoded.embeds.nbytes
            while self._cached_bytes > CACHE_BYTES and len(self._cache) > 1:     # least recently used first
                self._cached_bytes -= self._cache.popitem(last=False)[1].embeds.nbytes
            return encoded

    def _run(self, image: Image) -> Encoded:
        batch = self.processor(images=[image.rgb], return_tensors="np")
        pixels = torch.from_numpy(np.ascontiguousarray(batch["pixel_values"], dtype=np.float32))
        grid = torch.from_numpy(np.asarray(batch["image_grid_thw"], dtype=np.int64))
        threads = torch.get_num_threads()
        torch.set_num_threads(1)             # the same reduction order on any server
        try:
            with torch.inference_mode():
                out = self.tower(pixels, grid_thw=grid).pooler_output
        finally:
            torch.set_num_threads(threads)
        t, h, w = (int(v) for v in grid[0])
        return Encoded(image.digest, np.ascontiguousarray(out.numpy(), dtype=np.float32),
                       (t, h // self.merge, w // self.merge))
