"""Compile structured-output specs with xgrammar, once per (kind, text), off the engine thread.

One `GrammarCompiler` per tokenizer (and model vocabulary width). A spec is a
`GrammarSpec(kind, text)` whose text is canonical, so equal requests share one
compiled grammar from a bounded LRU cache. `compile_async` compiles on a small
thread pool (xgrammar releases the GIL while it works), so a new grammar never
holds up other requests' rounds; concurrent requests for the same spec share
one compilation.

JSON grammars (json_schema, json_object) allow any JSON whitespace between
two JSON tokens but at most `MAX_BLANKS` (32) blank characters in a row
(xgrammar's `max_whitespace_cnt`): pretty-printing fits, a run of blank lines
does not. The value itself has no leading or trailing blanks.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .errors import GrammarError, GrammarUnavailable, clean_reason, load_xgrammar

MAX_BLANKS = 32                      # blank characters allowed between two JSON tokens

KINDS = ("json_schema", "json_object", "regex", "choice", "ebnf")
ALIASES = {"json": "json_schema", "grammar": "ebnf", "guided_json": "json_schema",
           "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "ebnf"}
_LABELS = {"json_schema": "invalid JSON schema", "json_object": "JSON object grammar",
           "regex": "invalid regex", "choice": "invalid choice", "ebnf": "invalid grammar"}


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """What a reply must match: `kind` (one of KINDS) and its canonical `text` (the cache key)."""

    kind: str
    text: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.text)

    @classmethod
    def of(cls, kind: str, value: Any = None) -> GrammarSpec:
        """Build a spec from a request field's value, canonicalising it.

        json_schema: a dict/bool or a JSON string (property order is kept);
        json_object: no value; regex / ebnf: a string; choice: a list of strings.
        Raises GrammarError for a malformed value.
        """
        kind = ALIASES.get(kind, kind)
        if kind == "json_schema":
            return cls(kind, _canonical_schema(value))
        if kind == "json_object":
            return cls(kind, "")
        if kind in ("regex", "ebnf"):
            if not isinstance(value, str) or not value.strip():
                raise GrammarError(f"{_LABELS[kind]}: expected a non-empty string")
            return cls(kind, value)
        if kind == "choice":
            return cls(kind, json.dumps(_choices(value), ensure_ascii=False))
        raise GrammarError(f"unknown grammar kind {kind!r}; expected one of {', '.join(KINDS)}")

    @classmethod
    def json_schema(cls, schema: str | dict[str, Any] | bool) -> GrammarSpec:
        return cls.of("json_schema", schema)

    @classmethod
    def json_object(cls) -> GrammarSpec:
        return cls.of("json_object")

    @classmethod
    def regex(cls, pattern: str) -> GrammarSpec:
        return cls.of("regex", pattern)

    @classmethod
    def choice(cls, choices: Iterable[str]) -> GrammarSpec:
        return cls.of("choice", list(choices) if not isinstance(choices, str) else choices)

    @classmethod
    def ebnf(cls, grammar: str) -> GrammarSpec:
        return cls.of("ebnf", grammar)


def _canonical_schema(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise GrammarError(f"invalid JSON schema: not valid JSON: {exc}", str(exc)) from exc
    if not isinstance(value, (dict, bool)):
        raise GrammarError("invalid JSON schema: a schema must be a JSON object")
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise GrammarError(f"invalid JSON schema: {exc}", str(exc)) from exc


def _choices(value: Any) -> list[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise GrammarError("invalid choice: expected a list of strings")
    if not value:
        raise GrammarError("invalid choice: the list is empty")
    for c in value:
        if not isinstance(c, str):
            raise GrammarError(f"invalid choice: {c!r} is not a string")
        try:
            c.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise GrammarError(f"invalid choice: {exc}", str(exc)) from exc
    return list(value)


def choice_ebnf(choices: Sequence[str]) -> str:
    """An EBNF grammar matching exactly one of `choices` (JSON escapes are GBNF escapes)."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


class GrammarCompiler:
    """xgrammar's compiler for one tokenizer, with a (kind, text) -> CompiledGrammar LRU cache.

    `tokenizer` is a transformers tokenizer, or tensorfold's `Tokenizer` (its
    `.hf` and `.eos_token_ids` are used). `vocab_size` is the width of the
    model's logits, which may exceed len(tokenizer): ids past the tokenizer are
    never allowed. `stop_token_ids` are the end tokens a grammar allows once
    its value is complete (default: the tokenizer's end tokens).
    """

    def __init__(self, tokenizer: Any, vocab_size: int | None = None, *,
                 stop_token_ids: Iterable[int] | None = None, threads: int = 2,
                 cache_size: int = 128) -> None:
        xg = load_xgrammar()
        if "max_whitespace_cnt" not in inspect.signature(xg.GrammarCompiler.compile_json_schema).parameters:
            raise GrammarUnavailable("the installed xgrammar is too old (no max_whitespace_cnt); "
                                     "upgrade it")
        hf = getattr(tokenizer, "hf", None)
        if hf is None:
            hf = tokenizer
        elif stop_token_ids is None:           # tensorfold's Tokenizer: all of the model's end tokens
            stop_token_ids = getattr(tokenizer, "eos_token_ids", None)
        if isinstance(stop_token_ids, int):
            stop_token_ids = [stop_token_ids]
        stops = sorted({int(t) for t in stop_token_ids}) if stop_token_ids is not None else None
        try:
            self.tokenizer_info = xg.TokenizerInfo.from_huggingface(
                hf, vocab_size=vocab_size or len(hf), stop_token_ids=stops or None)
            self._xgc = xg.GrammarCompiler(self.tokenizer_info, max_threads=max(1, threads),
                                           cache_enabled=False)
        except Exception as exc:
            raise GrammarError(f"cannot prepare grammars for this tokenizer: {clean_reason(exc)}",
                               clean_reason(exc)) from exc
        self.vocab_size: int = int(self.tokenizer_info.vocab_size)
        self.stop_token_ids: tuple[int, ...] = tuple(self.tokenizer_info.stop_token_ids)
        self.cache_size = cache_size
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="tensorfold-grammar")
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._pending: dict[tuple[str, str], Future[Any]] = {}

    # -- public ------------------------------------------------------------------------
    def compile(self, spec: GrammarSpec) -> Any:
        """The compiled grammar for `spec` (an xgrammar CompiledGrammar), compiled here if new.

        Raises GrammarError with xgrammar's reason when it cannot compile.
        """
        with self._lock:
            hit = self._hit(spec.key)
            pending = self._pending.get(spec.key) if hit is None else None
        if hit is not None:
            return hit
        if pending is not None:
            return pending.result()
        return self._store(spec.key, self._build(spec))

    def compile_async(self, spec: GrammarSpec) -> Future[Any]:
        """A future of `compile(spec)`, compiled on the grammar thread pool (done at once on a hit)."""
        with self._lock:
            hit = self._hit(spec.key)
            if hit is not None:
                done: Future[Any] = Future()
                done.set_result(hit)
                return done
            fut = self._pending.get(spec.key)
            if fut is None:
                # registered under the lock, so the worker's clean-up cannot run before it
                fut = self._pool.submit(self._compile_pending, spec)
                self._pending[spec.key] = fut
            return fut

    def constraint(self, spec: GrammarSpec, think: Any = None) -> Any:
        """A GrammarConstraint for one request (compiles synchronously if needed).
        `think` (engine.types.Think, when the request thinks): the grammar starts
        after the think end, whether the prompt opened the block or the reply
        opens it (a one-token opener) with its first token."""
        from .constraint import GrammarConstraint

        if think is None or not (think.inside or think.reply_opener is not None):
            return GrammarConstraint(self.compile(spec))
        return GrammarConstraint(self.compile(spec), start_after=think.close, may_open=think.reply_opener)

    def cached(self, spec: GrammarSpec) -> bool:
        with self._lock:
            return spec.key in self._cache

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- internals -----------------------------------------------------------------------
    def _hit(self, key: tuple[str, str]) -> Any:
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
        return hit

    def _store(self, key: tuple[str, str], compiled: Any) -> Any:
        with self._lock:
            kept = self._cache.setdefault(key, compiled)      # a racing compile keeps the first
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            return kept

    def _compile_pending(self, spec: GrammarSpec) -> Any:
        try:
            return self._store(spec.key, self._build(spec))
        finally:
            with self._lock:
                self._pending.pop(spec.key, None)

    def _build(self, spec: GrammarSpec) -> Any:
        xgc, kind, text = self._xgc, spec.kind, spec.text
        try:
            if kind == "json_schema":
                return xgc.compile_json_schema(text, any_whitespace=True, max_whitespace_cnt=MAX_BLANKS)
            if kind == "json_object":
                return xgc.compile_json_schema('{"type":"object"}', any_whitespace=True, strict_mode=False,
                                               max_whitespace_cnt=MAX_BLANKS)
            if kind == "regex":
                return xgc.compile_regex(text)
            if kind == "choice":
                return xgc.compile_grammar(choice_ebnf(json.loads(text)))
            if kind == "ebnf":
                if "::=" not in text and hasattr(xgc, "compile_lark"):
                    return xgc.compile_lark(text)          # vLLM also takes Lark grammars
                return xgc.compile_grammar(text)
        except GrammarError:
            raise
        except Exception as exc:
            reason = clean_reason(exc)
            raise GrammarError(f"{_LABELS.get(kind, 'invalid grammar')}: {reason}", reason) from exc
        raise GrammarError(f"unknown grammar kind {kind!r}")
