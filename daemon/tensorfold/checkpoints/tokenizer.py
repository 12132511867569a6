"""The tokenizer and chat template of a model folder, as the server uses them.

What transformers resolves for the folder (its pipeline, special tokens and template:
tokenizer_spec.py, worked out once in a child process) is served here without
transformers: a byte-level BPE from compact tables (bpe.py), any other pipeline by the
Rust tokenizers library, and the template by chat_template.py's renderer.  ``hf`` loads
the transformers tokenizer itself on first use, for callers that need it (xgrammar in the
grammar host, the vision encoder).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from .bpe import BytePairs
from .chat_template import pick_template, render
from .errors import CheckpointError, TemplateError
from .hf_tokenizer import read_json
from .tokenizer_spec import tokenizer_spec

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


def end_token_ids(folder: Path, eos_token_id: Any) -> frozenset[int]:
    """A model's end tokens: its tokenizer's, generation_config.json's and config.json's."""
    ids = _ids(eos_token_id)
    ids |= _ids(read_json(folder / "generation_config.json").get("eos_token_id"))
    ids |= _ids(read_json(folder / "config.json").get("eos_token_id"))
    return frozenset(ids)


def _clean_up_spaces(text: str) -> str:
    """transformers' clean_up_tokenization (for a pipeline whose config asks for it)."""
    for old, new in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                     (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(old, new)
    return text


class RustPipeline:
    """Any other pipeline, by the Rust tokenizers library (the API of bpe.BytePairs)."""

    def __init__(self, text: str, clean_up_spaces: bool) -> None:
        from tokenizers import Tokenizer as RustTokenizer

        self._t = RustTokenizer.from_str(text)
        self._clean = clean_up_spaces
        self.special_ids = frozenset(i for i, t in self._t.get_added_tokens_decoder().items() if t.special)

    def __len__(self) -> int:
        return self._t.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._t.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        text = self._t.decode(ids, skip_special_tokens=skip_special_tokens)
        return _clean_up_spaces(text) if self._clean else text

    def id_to_token(self, i: int) -> str | None:
        return self._t.id_to_token(i)


class Tokenizer:
    """Encode, decode and render chat templates for one model folder."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        spec = tokenizer_spec(self.folder)
        try:
            self.codec: BytePairs | RustPipeline = BytePairs.load(spec["tokenizer"]) or \
                RustPipeline(spec["tokenizer"], spec["clean_up_spaces"])
        except Exception as exc:
            raise CheckpointError(f"could not load the tokenizer from {self.folder}: {exc}") from exc
        self.special_tokens: dict[str, str] = spec["special_tokens"]
        self.chat_template_source: str | dict[str, str] | None = spec["chat_template"]
        self.eos_token_ids = end_token_ids(self.folder, spec["eos_token_id"])
        bos = spec["bos_token_id"]
        self.bos_token_id: int | None = int(bos) if isinstance(bos, int) else None
        self.vocab_size: int = int(spec["length"])
        self.special_ids: frozenset[int] = self.codec.special_ids
        self.fim_ids = self._fim_ids()
        if not self.eos_token_ids:
            log.warning("tokenizer in %s names no end-of-sequence token", self.folder)

    def _single(self, token: str) -> int | None:
        """The id spelled `token`, if one is."""
        ids = self.codec.encode(token)
        return ids[0] if len(ids) == 1 and self.codec.id_to_token(ids[0]) == token else None

    def _fim_ids(self) -> tuple[int, int, int] | None:
        """The ids of the first FIM spelling the vocabulary has whole, or None."""
        for names in FIM_TOKENS:
            ids = [self._single(t) for t in names]
            if None not in ids:
                return ids[0], ids[1], ids[2]
        return None

    @cached_property
    def hf(self) -> Any:
        """The folder's transformers tokenizer (loaded on first use; the server never needs it)."""
        from .hf_tokenizer import hf_tokenizer

        return hf_tokenizer(self.folder)

    @property
    def chat_template(self) -> str:
        template = self.chat_template_source
        return template if isinstance(template, str) else ""

    @chat_template.setter
    def chat_template(self, source: str) -> None:
        self.chat_template_source = source

    @property
    def has_chat_template(self) -> bool:
        return bool(self.chat_template_source)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.codec.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self.codec.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str | None]:
        return [self.codec.id_to_token(int(i)) for i in ids]

    def same_vocabulary(self, other: Tokenizer) -> bool:
        """Whether both spell every id alike."""
        return len(self.codec) == len(other.codec) and all(
            self.codec.id_to_token(i) == other.codec.id_to_token(i) for i in range(len(self.codec)))

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
        source = pick_template(self.chat_template_source, tools)
        if not source:
            raise TemplateError(f"the model in {self.folder} has no chat template; use the completions endpoint")
        from jinja2 import TemplateError as JinjaTemplateError

        try:
            rendered = render(source, messages, tools, add_generation_prompt, self.special_tokens, **template_kwargs)
        except JinjaTemplateError as exc:
            raise TemplateError(f"chat template error: {exc.message or exc}") from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise TemplateError(f"chat template error: {exc}") from exc
        if not isinstance(rendered, str):  # some versions return a list for batched input
            raise TemplateError("chat template did not render a single prompt")
        return rendered

    def __repr__(self) -> str:
        return f"Tokenizer({str(self.folder)!r}, vocab_size={self.vocab_size}, eos={sorted(self.eos_token_ids)})"
