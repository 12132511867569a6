"""A forced call in the Hermes format: the whole call held to a grammar.

When tool_choice forces a call ("required" or a named function) and the reply
is read in the Hermes format, the reply is exactly one call,

    <tool_call>
    {"name": NAME, "arguments": ARGS}
    </tool_call>

with NAME one of the offered tools and ARGS a JSON object: valid against the
tool's `parameters` when the tool is `"strict": true`, any object otherwise
(the model's own arguments, but always a call that parses), then an end token.
The grammar is xgrammar's, so exact under drafting like any grammar; it is a
`GrammarSpec.wrapped_json`, built and compiled in the grammar compiler's
worker processes like any other (cached, and bounded by the same time budget).
Forced calls in other formats keep ToolForce: the name is held to the offered
ones and the model writes the rest.
"""

from __future__ import annotations

from typing import Any

from ...grammar.spec import GrammarSpec
from .tool_force import forces_call
from .tool_prompt import CALL_CLOSE, CALL_OPEN, ToolFormat


def forced_call_spec(body: Any, tools: list[dict[str, Any]] | None, fmt: ToolFormat) -> GrammarSpec | None:
    """The grammar of the one call the reply must be, or None when the request does
    not force a call in the Hermes format."""
    if not forces_call(body) or not tools or fmt.parser != "hermes":
        return None
    calls = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
              "properties": {"name": {"const": t["function"]["name"]},
                             "arguments": _arguments_schema(t["function"])}}
             for t in tools]
    return GrammarSpec.wrapped_json(CALL_OPEN, calls[0] if len(calls) == 1 else {"anyOf": calls}, CALL_CLOSE)


def _arguments_schema(function: dict[str, Any]) -> dict[str, Any]:
    if function.get("strict") is True:
        return function.get("parameters") or {"type": "object"}
    return {"type": "object"}
