"""What the server needs of a folder's tokenizer, as transformers resolves it.

transformers' tokenizer classes can change the pipeline a tokenizer.json describes
(Qwen2Tokenizer adds NFC normalization that a GGUF's conversion lacks), pick the chat
template among several files, and name the special tokens.  The server must behave as
that tokenizer does, but importing transformers costs it about 30 MiB for good.  So a
child process loads the transformers tokenizer once and writes down what it resolved:
its Rust pipeline (tokenizer.json's format), special tokens, end and start ids, chat
template, length.  The result is kept in the model cache (``.tokenizers/``), keyed by a
hash of the folder's tokenizer files and the transformers version, so the next start
reads it back in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .child import child_main, run_module
from .paths import model_cache_dir

FORMAT = 1
# every file a transformers tokenizer may read from its folder
FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
         "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model",
         "config.json")
CHILD_TIMEOUT = 300.0
MODULE = "tensorfold.checkpoints.tokenizer_spec"


def spec_key(folder: Path) -> str:
    """A hash of what the resolved tokenizer depends on."""
    h = hashlib.sha256(f"{FORMAT} {_transformers_version()}".encode())
    for name in FILES:
        path = folder / name
        if path.is_file():
            h.update(f"\0{name}\0".encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:32]


def _transformers_version() -> str:
    try:
        return version("transformers")
    except PackageNotFoundError:
        return "none"


def _cache_path(key: str) -> Path:
    return model_cache_dir(create=False) / ".tokenizers" / f"{key}.json"


def tokenizer_spec(folder: Path) -> dict[str, Any]:
    """The folder's resolved tokenizer: from the cache, else from a child process (then cached)."""
    try:
        return json.loads(_cache_path(spec_key(folder)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    text = run_module(MODULE, [str(folder)], f"could not load the tokenizer from {folder}", CHILD_TIMEOUT)
    spec = json.loads(text)
    _store(_cache_path(spec_key(folder)), text)      # the child may have recorded the class in a file
    return spec


def _store(path: Path, text: str) -> None:
    """Write the spec (whole, by rename); a cache that cannot be written is skipped."""
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch.write_text(text, encoding="utf-8")
        os.replace(scratch, path)
    except OSError:
        scratch.unlink(missing_ok=True)


def resolve(folder: Path) -> dict[str, Any]:
    """The spec, from transformers' tokenizer for the folder (run in the child)."""
    from .hf_tokenizer import hf_tokenizer

    hf = hf_tokenizer(folder)
    backend = hf.backend_tokenizer
    template = getattr(hf, "chat_template", None)
    return {
        "format": FORMAT,
        "class": type(hf).__name__,
        "tokenizer": backend.to_str(),
        "length": len(hf),
        "bos_token_id": hf.bos_token_id,
        "eos_token_id": hf.eos_token_id,
        "special_tokens": dict(hf.special_tokens_map),
        "chat_template": template if isinstance(template, (str, dict)) else None,
        # transformers skips the clean-up for a BPE model (it would strip real spaces)
        "clean_up_spaces": bool(getattr(hf, "clean_up_tokenization_spaces", False))
        and type(backend.model).__name__ != "BPE",
    }


if __name__ == "__main__":
    child_main(lambda argv: json.dumps(resolve(Path(argv[0])), ensure_ascii=False))
