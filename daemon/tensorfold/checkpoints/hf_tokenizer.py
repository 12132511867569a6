"""A model folder's transformers tokenizer, loaded from local files only (never the hub).

The server itself does not load it (tokenizer_spec.py resolves what it needs once, in a
child process); the grammar host (xgrammar reads a transformers tokenizer), the vision
encoder and the tests do.  A folder converted from a GGUF names the class AutoTokenizer
resolved for it (recorded at conversion, or on an older conversion's first load), which
loads directly; other folders go through ``AutoTokenizer``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .files import GGUF_FILE

log = logging.getLogger(__name__)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file's object, or {} where it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _declared_class_config(folder: Path, config: dict[str, Any]) -> dict[str, Any]:
    """AutoTokenizer's `config` argument where tokenizer_config.json names the class (and no
    remote code): the model type (of `config`, the folder's config.json) and the folder, all
    it reads of the model's config then, so it does not build the model's config class (for
    Llama, that imports transformers' model loading, torch.distributed and sympy: 49 MiB and
    0.9 s on SmolLM2).  {} otherwise."""
    declared = read_json(folder / "tokenizer_config.json")
    if not isinstance(declared.get("tokenizer_class"), str) or "auto_map" in declared:
        return {}
    model_type = config.get("model_type")
    return {"config": SimpleNamespace(model_type=model_type if isinstance(model_type, str) else None,
                                      _name_or_path=str(folder))}


# What some transformers tokenizer classes keep after building their Rust tokenizer from
# it: Qwen2Tokenizer keeps its vocabulary and 151k merges as Python objects (60 MiB).
# The Rust tokenizer holds its own copy, and nothing the server calls reads these again
# (transformers reads them only to build, or to save a vocabulary file).
BUILD_INPUTS = ("_vocab", "_merges")


def _release_build_inputs(hf: Any) -> None:
    """Drop BUILD_INPUTS from a tokenizer backed by a Rust one (`tokenizers.Tokenizer`)."""
    from tokenizers import Tokenizer as RustTokenizer

    if isinstance(getattr(hf, "_tokenizer", None), RustTokenizer):
        for name in BUILD_INPUTS:
            vars(hf).pop(name, None)


def auto_tokenizer(folder: Path) -> Any:
    """transformers' AutoTokenizer on the folder (its model type from config.json)."""
    from transformers import AutoTokenizer

    config = read_json(folder / "config.json")
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, **_declared_class_config(folder, config))


# The class every GGUF conversion named before the resolved one was recorded.
UNRESOLVED_CLASS = "PreTrainedTokenizerFast"


def record_resolved_class(folder: Path) -> Any:
    """AutoTokenizer's tokenizer for a folder converted from a GGUF, its class written into the
    folder's tokenizer_config.json (one file replaced whole; a read-only folder keeps its own)."""
    hf = auto_tokenizer(folder)
    path = folder / "tokenizer_config.json"
    cfg = {**read_json(path), "tokenizer_class": type(hf).__name__}
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        scratch.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(scratch, path)
    except OSError as exc:
        log.debug("could not record the tokenizer class in %s: %s", path, exc)
        scratch.unlink(missing_ok=True)
    return hf


def _load(folder: Path) -> Any:
    """The folder's transformers tokenizer.  A folder converted from a GGUF names the class
    AutoTokenizer resolved for it (the conversion, or the first load of an older conversion,
    records it), which loads directly: AutoTokenizer's module imports transformers' model
    configuration, and with it torch (220 MiB), which the CPU engine otherwise never imports."""
    if not ((folder / GGUF_FILE).is_symlink() or (folder / GGUF_FILE).is_file()):
        return auto_tokenizer(folder)
    declared = read_json(folder / "tokenizer_config.json").get("tokenizer_class")
    if declared == UNRESOLVED_CLASS or not isinstance(declared, str):
        return record_resolved_class(folder)
    import transformers

    cls = getattr(transformers, declared, None)
    if cls is None or not hasattr(cls, "from_pretrained"):
        return auto_tokenizer(folder)
    return cls.from_pretrained(str(folder), local_files_only=True)


def hf_tokenizer(folder: Path) -> Any:
    """The folder's transformers tokenizer, without what it built its Rust tokenizer from."""
    hf = _load(folder)
    _release_build_inputs(hf)
    return hf
