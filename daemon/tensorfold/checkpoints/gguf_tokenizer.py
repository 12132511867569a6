"""Export the tokenizer a GGUF file describes as ``tokenizer.json`` + config.

transformers builds the tokenizer from the GGUF metadata; we then fix what
it leaves out or gets wrong for our purposes:

- a few llama.cpp pre-tokenizer types (``smollm``, ``starcoder``, ...) split
  every digit apart before the GPT-2 regex; transformers falls back to the
  plain GPT-2 split for them, so we install the digit split;
- the chat template must survive in ``tokenizer_config.json`` *and* in
  ``chat_template.jinja`` (the file transformers 5 reads first);
- ``tokenizer_class`` names the class transformers' ``AutoTokenizer``
  resolves for the folder (for Qwen2, ``Qwen2Tokenizer``; for most others,
  ``TokenizersBackend``), so the server loads that class directly
  (tokenizer.py) without AutoTokenizer's imports, and load-time keys
  (``is_local``, ``local_files_only``) are dropped.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import CheckpointError
from .hf_tokenizer import UNRESOLVED_CLASS, record_resolved_class

log = logging.getLogger(__name__)

CHAT_TEMPLATE_FILE = "chat_template.jinja"
# llama.cpp pre-tokenizers that split "\p{N}" (each digit) before the GPT-2 regex.
_DIGIT_SPLIT_PRE = {"smollm", "starcoder", "refact", "codeshell", "exaone", "minerva"}
_LOAD_TIME_KEYS = ("is_local", "local_files_only", "name_or_path", "_commit_hash")


def _fix_pre_tokenizer(tok: Any, meta: dict[str, Any]) -> None:
    from tokenizers import pre_tokenizers

    if meta.get("tokenizer.ggml.model") != "gpt2" or meta.get("tokenizer.ggml.pre") not in _DIGIT_SPLIT_PRE:
        return
    backend = tok.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    log.debug("pre-tokenizer %r: split digits, then the GPT-2 regex", meta.get("tokenizer.ggml.pre"))


@contextmanager
def _alone(gguf_path: Path, scratch: Path) -> Iterator[Path]:
    """A folder holding only (a link to) the GGUF.

    transformers also reads ``tokenizer_config.json`` / ``config.json`` from
    the folder it is pointed at; a GGUF downloaded next to another model's
    files must not pick those up.
    """
    scratch.mkdir(parents=True, exist_ok=True)
    link = scratch / gguf_path.name
    try:
        try:
            link.symlink_to(gguf_path.resolve())
        except OSError:
            try:
                os.link(gguf_path, link)
            except OSError:
                log.debug("cannot link %s; reading it in place", gguf_path)
                yield gguf_path.parent
                return
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def export_tokenizer(gguf_path: Path, out_dir: Path, meta: dict[str, Any]) -> None:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` and the chat template into ``out_dir``."""
    from transformers import AutoTokenizer

    try:
        with _alone(gguf_path, out_dir / ".gguf-source") as folder:
            tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_path.name, local_files_only=True)
    except Exception as exc:
        raise CheckpointError(f"could not build a tokenizer from {gguf_path.name}: {exc}") from exc
    _fix_pre_tokenizer(tok, meta)
    tok.save_pretrained(str(out_dir))

    template = meta.get("tokenizer.chat_template")
    cfg_path = out_dir / "tokenizer_config.json"
    cfg: dict[str, Any] = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
    for key in _LOAD_TIME_KEYS:
        cfg.pop(key, None)
    cfg["tokenizer_class"] = UNRESOLVED_CLASS
    context = meta.get(f"{meta.get('general.architecture')}.context_length")
    if isinstance(context, int) and context > 0:
        cfg["model_max_length"] = context
    # llama.cpp adds BOS to a sentencepiece ("llama") vocabulary that does not say otherwise.
    sentencepiece = meta.get("tokenizer.ggml.model") == "llama"
    cfg["add_bos_token"] = bool(meta.get("tokenizer.ggml.add_bos_token", sentencepiece))
    cfg["add_eos_token"] = bool(meta.get("tokenizer.ggml.add_eos_token", False))
    if isinstance(template, str) and template:
        cfg["chat_template"] = template
        (out_dir / CHAT_TEMPLATE_FILE).write_text(template, encoding="utf-8")
    else:
        log.warning("%s carries no chat template; chat requests will be refused", gguf_path.name)
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if not (out_dir / "tokenizer.json").is_file():
        raise CheckpointError(f"transformers wrote no tokenizer.json for {gguf_path.name}")
    record_resolved_class(out_dir)
