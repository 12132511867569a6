"""Model families: each module names the architectures it serves."""

from __future__ import annotations

from types import ModuleType

from . import llama, qwen3, qwen3_5

FAMILIES: dict[str, ModuleType] = {arch: mod for mod in (llama, qwen3, qwen3_5) for arch in mod.ARCHITECTURES}
