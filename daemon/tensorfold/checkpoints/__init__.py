"""Find, fetch, convert and load model files.

Public API (imported lazily, so ``import tensorfold.checkpoints`` stays cheap):

- ``resolve_model(spec, progress=True) -> Path``: a ``--model`` value to a local HF-style folder
- ``list_cached() -> list[CachedModel]``
- ``pull_default(progress=True) -> Path``: the built-in SmolLM2-135M-Instruct
- ``convert_gguf(gguf_path, out_dir, move=False) -> Path``
- ``Tokenizer(folder)``: encode / decode / render_chat
- ``read_config(folder) -> dict``, ``iter_weights(folder)``, ``gguf_file(folder)``
- ``model_cache_dir(create=True) -> Path``
- ``CheckpointError``, ``TemplateError``
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import CheckpointError, TemplateError

_EXPORTS = {
    "resolve_model": "resolve",
    "list_cached": "resolve",
    "CachedModel": "resolve",
    "pull_default": "default",
    "DEFAULT_MODEL_NAME": "default",
    "default_model_dir": "default",
    "convert_gguf": "gguf_convert",
    "Tokenizer": "tokenizer",
    "read_config": "files",
    "iter_safetensors": "files",
    "iter_weights": "files",
    "gguf_file": "files",
    "model_cache_dir": "paths",
}

__all__ = ["CheckpointError", "TemplateError", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
