"""Function tools with `"strict": true` under a forced call: the whole call held to a grammar.

When tool_choice forces a call ("required" or a named function), the reply is
read in the Hermes format, and every offered tool is strict, the reply is
exactly one call,

    <tool_call>
    {"name": NAME, "arguments": ARGS}
    </tool_call>

with NAME one of the offered tools and ARGS valid against that tool's
`parameters` (xgrammar, so exact under drafting like any grammar), then an end
token. A forced call to tools that are not all strict keeps ToolForce: the
name is held to the offered ones and the model writes the arguments.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from ..grammar.errors import GrammarError, load_xgrammar
from .tool_force import forces_call
from .tool_prompt import CALL_CLOSE, CALL_OPEN, ToolFormat


def strict_call_ebnf(body: Any, tools: list[dict[str, Any]] | None, fmt: ToolFormat) -> str | None:
    """The EBNF grammar of the one strict call the reply must be, or None when the
    request does not force a call in the Hermes format to tools that are all strict."""
    if not forces_call(body) or not tools or fmt.parser != "hermes":
        return None
    if not all(t["function"].get("strict") is True for t in tools):
        return None
    calls = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
              "properties": {"name": {"const": t["function"]["name"]},
                             "arguments": t["function"].get("parameters") or {"type": "object"}}}
             for t in tools]
    return _call_ebnf(json.dumps(calls[0] if len(calls) == 1 else {"anyOf": calls}))


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
