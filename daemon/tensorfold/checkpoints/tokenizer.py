"""The tokenizer and chat template of a model folder.

A thin wrapper over a transformers tokenizer, loaded from local files only
(never the hub): the class a folder converted from a GGUF names (the one
AutoTokenizer resolved for it, recorded at conversion or on an older
conversion's first load), else whatever ``AutoTokenizer`` picks.  ``hf`` exposes the underlying tokenizer
for callers that need more (incremental detokenization, offsets).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .errors import CheckpointError, TemplateError
from .files import GGUF_FILE

log = logging.getLogger(__name__)


def _ids(value: Any) -> set[int]:
    """Token ids from a config value that may be an int, a list of ints or absent."""
    if isinstance(value, bool) or value is None:
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, (list, tuple)):
        return {v for v in value if isinstance(v, int) and not isinstance(v, bool)}
    return set()


# Fill-in-the-middle tokens (prefix, suffix, middle), in the spellings checkpoints use:
# Qwen2.5-Coder and CodeGemma, then StarCoder and its descendants.
FIM_TOKENS = (("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
              ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"))


def _read_json(path: Path) -> dict[str, Any]:
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
    declared = _read_json(folder / "tokenizer_config.json")
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

    config = _read_json(folder / "config.json")
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, **_declared_class_config(folder, config))


# The class every GGUF conversion named before the resolved one was recorded.
UNRESOLVED_CLASS = "PreTrainedTokenizerFast"


def record_resolved_class(folder: Path) -> Any:
    """AutoTokenizer's tokenizer for a folder converted from a GGUF, its class written into the
    folder's tokenizer_config.json (one file replaced whole; a read-only folder keeps its own)."""
    hf = auto_tokenizer(folder)
    path = folder / "tokenizer_config.json"
    cfg = {**_read_json(path), "tokenizer_class": type(hf).__name__}
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
    declared = _read_json(folder / "tokenizer_config.json").get("tokenizer_class")
    if declared == UNRESOLVED_CLASS or not isinstance(declared, str):
        return record_resolved_class(folder)
    import transformers

    cls = getattr(transformers, declared, None)
    if cls is None or not hasattr(cls, "from_pretrained"):
        return auto_tokenizer(folder)
    return cls.from_pretrained(str(folder), local_files_only=True)


class Tokenizer:
    """Encode, decode and render chat templates for one model folder."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        config = _read_json(self.folder / "config.json")
        try:
            self.hf: Any = _load(self.folder)
        except Exception as exc:
            raise CheckpointError(f"could not load the tokenizer from {self.folder}: {exc}") from exc
        _release_build_inputs(self.hf)
        eos = _ids(self.hf.eos_token_id)
        eos |= _ids(_read_json(self.folder / "generation_config.json").get("eos_token_id"))
        eos |= _ids(config.get("eos_token_id"))
        self.eos_token_ids: frozenset[int] = frozenset(eos)
        bos = self.hf.bos_token_id
        self.bos_token_id: int | None = int(bos) if isinstance(bos, int) else None
        self.vocab_size: int = len(self.hf)
        vocab = self.hf.get_vocab()
        # the ids of the first FIM spelling the vocabulary has whole, or None
        self.fim_ids: tuple[int, int, int] | None = next(
            (tuple(vocab[t] for t in names) for names in FIM_TOKENS if all(t in vocab for t in names)), None)
        if not self.eos_token_ids:
            log.warning("tokenizer in %s names no end-of-sequence token", self.folder)

    @property
    def chat_template(self) -> str:
        template = getattr(self.hf, "chat_template", None)
        return template if isinstance(template, str) else ""

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf, "chat_template", None))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return str(self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return list(self.hf.convert_ids_to_tokens(list(ids)))

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        """The prompt text for ``messages`` (and ``tools``) under the model's chat template.

        Raises ``TemplateError`` when the model has no template or the
        template refuses the conversation (``raise_exception`` in Jinja,
        missing keys, bad roles...), with the template's own message.
        """
        if not self.has_chat_template:
            raise TemplateError(f"the model in {self.folder} has no chat template; use the completions endpoint")
        from jinja2 import TemplateError as JinjaTemplateError

        try:
            rendered = self.hf.apply_chat_template(
                messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **template_kwargs,
            )
        except JinjaTemplateError as exc:
            raise TemplateError(f"chat template error: {exc.message or exc}") from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise TemplateError(f"chat template error: {exc}") from exc
        if not isinstance(rendered, str):  # some versions return a list for batched input
            raise TemplateError("chat template did not render a single prompt")
        return rendered

    def __repr__(self) -> str:
        return f"Tokenizer({str(self.folder)!r}, vocab_size={self.vocab_size}, eos={sorted(self.eos_token_ids)})"
