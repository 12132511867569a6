"""The models a local daemon can serve without a download, for the front ends'
model pickers (a light import: the cache's folder names, paths and sizes)."""

from __future__ import annotations

from typing import Any


def cached_models() -> list[Any]:
    """`CachedModel`s: the model cache, then the Hugging Face hub cache."""
    from ..checkpoints.resolve import list_cached

    return list_cached()
