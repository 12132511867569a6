"""A forced call in the Hermes format: the whole call held to a grammar.

When tool_choice forces a call ("required" or a named function) and the reply
is read in the Hermes format, the reply is exactly one call,

    <tool_call>
    {"name": NAME, "arguments": ARGS}
    </tool_call>

with NAME one of the offered tools and ARGS a JSON object: valid against the
tool's `parameters` when the tool is `"strict": true`, any object otherwise
(the model's own arguments, but always a call that parses), then an end token.
The grammar is xgrammar's, so exact under drafting like any grammar. Forced
calls in other formats keep ToolForce: the name is held to the offered ones
and the model writes the rest.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from ..grammar.errors import GrammarError, load_xgrammar
from .tool_force import forces_call
from .tool_prompt import CALL_CLOSE, CALL_OPEN, ToolFormat


def forced_call_ebnf(body: Any, tools: list[dict[str, Any]] | None, fmt: ToolFormat) -> str | None:
    """The EBNF grammar of the one call the reply must be, or None when the request does
    not force a call in the Hermes format."""
    if not forces_call(body) or not tools or fmt.parser != "hermes":
        return None
    calls = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
              "properties": {"name": {"const": t["function"]["name"]},
                             "arguments": _arguments_schema(t["function"])}}
             for t in tools]
    return _call_ebnf(json.dumps(calls[0] if len(calls) == 1 else {"anyOf": calls}))


def _arguments_schema(function: dict[str, Any]) -> dict[str, Any]:
    if function.get("strict") is True:
        return function.get("parameters") or {"type": "object"}
    return {"type": "object"}


@lru_cache(maxsize=64)
def _call_ebnf(schema: str) -> str:
    """The call grammar for a JSON schema of the call object; built on the event loop,
    so a client repeating its tools pays for it once."""
    xg = load_xgrammar()
    try:
        call = xg.Grammar.from_json_schema(schema, any_whitespace=False)
    except Exception as exc:             # xgrammar raises plain errors for schemas it cannot take
        raise GrammarError(str(exc), str(exc)) from exc
    text = lambda s: xg.Grammar.from_ebnf("root ::= " + json.dumps(s))  # noqa: E731
    return str(xg.Grammar.concat(text(CALL_OPEN), call, text(CALL_CLOSE)))
