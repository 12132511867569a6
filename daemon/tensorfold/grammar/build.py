"""One spec compiled with xgrammar: what the worker processes run, and the server for
specs they found fast (compile.py)."""

from __future__ import annotations

import json
from typing import Any

from .errors import GrammarError, clean_reason, load_xgrammar
from .spec import LABELS, MAX_BLANKS, WRAPPED_JSON, choice_ebnf

# xgrammar (0.2.9) writes a JSON string with minLength or maxLength as repeats of this class,
# which lets control characters U+0000..U+001F other than CR and LF through: invalid JSON.
# Its unbounded strings use the class that excludes them all.
_LENGTH_CHARS = r'[^\"\\\r\n]'
_STRING_CHARS = r'[^\0-\x1f\"\\\r\n]'


def json_grammar(xg: Any, schema: str, **options: Any) -> Any:
    """xgrammar's grammar for a JSON schema, with every string character class excluding
    the control characters JSON forbids unescaped."""
    grammar = xg.Grammar.from_json_schema(schema, **options)
    ebnf = str(grammar)
    return xg.Grammar.from_ebnf(ebnf.replace(_LENGTH_CHARS, _STRING_CHARS)) if _LENGTH_CHARS in ebnf else grammar


def build(xgc: Any, kind: str, text: str) -> Any:
    """Compile one spec with xgrammar compiler `xgc`; GrammarError with xgrammar's reason."""
    xg = load_xgrammar()
    try:
        if kind == "json_schema":
            return xgc.compile_grammar(json_grammar(xg, text, any_whitespace=True, max_whitespace_cnt=MAX_BLANKS))
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
        if kind == WRAPPED_JSON:
            before, schema, after = json.loads(text)
            value = json_grammar(xg, json.dumps(schema), any_whitespace=False)
            literal = lambda s: xg.Grammar.from_ebnf("root ::= " + json.dumps(s))  # noqa: E731
            return xgc.compile_grammar(xg.Grammar.concat(literal(before), value, literal(after)))
    except GrammarError:
        raise
    except Exception as exc:
        reason = clean_reason(exc)
        raise GrammarError(f"{LABELS.get(kind, 'invalid grammar')}: {reason}", reason) from exc
    raise GrammarError(f"unknown grammar kind {kind!r}")
