"""A Qwen3.5 checkpoint's vision tower: images to the embeddings its language model
reads at the image's positions.

The tower and its image processor come from transformers (a dependency): the
processor resizes by the checkpoint's min/max pixel rule and cuts patches; the
tower (transformers' Qwen3_5VisionModel with the checkpoint's `model.visual.*`
weights) turns them into one embedding per merged 2x2 patch.  Each image runs
alone, in fp32, on one torch thread, so an image's embeddings have the same bits
whatever else the server does; they are cached by the image's digest.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..checkpoints.errors import CheckpointError
from ..checkpoints.files import iter_safetensors, read_config

if TYPE_CHECKING:
    from .source import Image

CACHED_IMAGES = 64


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


class VisionEncoder:
    def __init__(self, folder: Path) -> None:
        from transformers import Qwen2VLImageProcessorPil, Qwen3_5VisionConfig
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel

        config = read_config(folder)
        if not isinstance(config.get("vision_config"), dict):
            raise CheckpointError(f"{folder.name} has no vision tower (no vision_config in its config.json)")
        self.image_token_id = int(config.get("image_token_id", 248056))
        self.start_token_id = int(config.get("vision_start_token_id", 248053))
        self.end_token_id = int(config.get("vision_end_token_id", 248054))
        vision = Qwen3_5VisionConfig(**config["vision_config"])
        self.merge = vision.spatial_merge_size
        with torch.device("cpu"):
            self.tower = Qwen3_5VisionModel(vision).to(torch.float32).eval()
        weights = {name[len("model.visual."):]: t.to(torch.float32) for name, t in iter_safetensors(folder)
                   if name.startswith("model.visual.")}
        missing, unexpected = self.tower.load_state_dict(weights, strict=False)
        if missing or unexpected:
            raise CheckpointError(f"{folder.name}: the vision tower's weights do not fit its config "
                                  f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
        settings = json.loads((folder / "preprocessor_config.json").read_text()) \
            if (folder / "preprocessor_config.json").is_file() else {}
        settings = {k: v for k, v in settings.items() if k not in ("image_processor_type", "processor_class")}
        settings.setdefault("patch_size", vision.patch_size)
        settings.setdefault("temporal_patch_size", vision.temporal_patch_size)
        settings.setdefault("merge_size", self.merge)
        self.processor = Qwen2VLImageProcessorPil(**settings)
        self._cache: OrderedDict[str, Encoded] = OrderedDict()
        self._lock = threading.Lock()

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
            while len(self._cache) > CACHED_IMAGES:
                self._cache.popitem(last=False)
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
