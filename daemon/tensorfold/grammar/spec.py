"""What a reply must match: `GrammarSpec(kind, text)`, with canonical text (the cache key).

Pure Python (no xgrammar): the API builds specs from request fields, the
compiler (compile.py) caches by them and the worker (worker.py) compiles them.

JSON grammars (json_schema, json_object) allow any JSON whitespace between
two JSON tokens but at most `MAX_BLANKS` (32) blank characters in a row
(xgrammar's `max_whitespace_cnt`): pretty-printing fits, a run of blank lines
does not. The value itself has no leading or trailing blanks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import GrammarError

MAX_BLANKS = 32                      # blank characters allowed between two JSON tokens

KINDS = ("json_schema", "json_object", "regex", "choice", "ebnf")      # what requests may name
WRAPPED_JSON = "wrapped_json"        # the server's own: fixed text, compact JSON, fixed text
ALIASES = {"json": "json_schema", "grammar": "ebnf", "guided_json": "json_schema",
           "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "ebnf"}
LABELS = {"json_schema": "invalid JSON schema", "json_object": "JSON object grammar",
          "regex": "invalid regex", "choice": "invalid choice", "ebnf": "invalid grammar",
          WRAPPED_JSON: "invalid JSON schema"}


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
                raise GrammarError(f"{LABELS[kind]}: expected a non-empty string")
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

    @classmethod
    def wrapped_json(cls, before: str, schema: str | dict[str, Any] | bool, after: str) -> GrammarSpec:
        """`before`, then one JSON value valid against `schema` written without blanks
        between its tokens, then `after` (e.g. a forced tool call: api/request/tool_strict.py)."""
        parts = [before, json.loads(_canonical_schema(schema)), after]
        return cls(WRAPPED_JSON, json.dumps(parts, ensure_ascii=False, separators=(",", ":")))


def _canonical_schema(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except RecursionError:
            raise GrammarError("invalid JSON schema: nested too deep") from None
        except ValueError as exc:
            raise GrammarError(f"invalid JSON schema: not valid JSON: {exc}", str(exc)) from exc
    if not isinstance(value, (dict, bool)):
        raise GrammarError("invalid JSON schema: a schema must be a JSON object")
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except RecursionError:
        raise GrammarError("invalid JSON schema: nested too deep") from None
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
