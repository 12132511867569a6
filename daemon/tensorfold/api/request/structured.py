"""Structured outputs at the edge: which grammar a request asks for, compiled before any token.

One request names at most one of: response_format (json_schema, json_object),
vLLM's guided_json, guided_regex, guided_choice, guided_grammar (EBNF), or
structured_outputs (json, json_object, regex, choice, grammar). Compiling runs
in the grammar compiler's worker processes (grammar/compile.py, cached by text),
never on the event loop; a client that leaves while its grammar compiles
withdraws from that compile. A grammar that xgrammar cannot compile, one that
takes longer than the compiler's time budget, a server without xgrammar, and a
grammar sent with a forced tool call are each a 400 before any token; a server
with too many grammars pending answers 429.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from ...config import Limits
from ...engine.constraints import ThinkingBudget, ToolForce
from ...engine.types import Request
from ...grammar import GrammarBusy, GrammarError, GrammarSpec, GrammarTimeout, GrammarUnavailable
from .. import errors
from .limits import check_grammar
from .names import field_name
from .tool_force import forces_call, offered
from .tool_prompt import ToolFormat
from .tool_strict import forced_call_spec

STRUCTURED_KINDS = {"json": "json_schema", "json_object": "json_object", "regex": "regex",
                    "choice": "choice", "grammar": "ebnf"}


def grammar_request(body: Any) -> tuple[str, Any, str] | None:
    """(kind, value, field) of the grammar a validated body asks for; None for free text."""
    found: list[tuple[str, str, Any]] = []
    fmt = body.response_format
    if fmt is not None and fmt["type"] == "json_object":
        found.append((field_name("response_format"), "json_object", None))
    elif fmt is not None and fmt["type"] == "json_schema":
        found.append((field_name("response_format"), "json_schema", fmt["json_schema"]["schema"]))
    for field, kind in (("guided_json", "json_schema"), ("guided_regex", "regex"),
                        ("guided_choice", "choice"), ("guided_grammar", "ebnf")):
        if getattr(body, field) is not None:
            found.append((field, kind, getattr(body, field)))
    if body.structured_outputs is not None:
        (key, value), = body.structured_outputs.items()
        found.append((f"structured_outputs.{key}", STRUCTURED_KINDS[key], value))
    if not found:
        return None
    if len(found) > 1:
        names = ", ".join(f"'{f[0]}'" for f in found)
        raise errors.invalid(f"Send one structured-output field, not several ({names})", param=found[1][0])
    field, kind, value = found[0]
    return kind, value, field


async def attach_grammar(request: Request, body: Any, engine: Any, limits: Limits,
                         fmt: ToolFormat | None = None) -> Request:
    """`request` with the body's grammar as a constraint (compiled off the event loop,
    within `limits`): a structured-output field's, or, for a forced call in the Hermes
    format, the call's (tool_strict.py), which replaces ToolForce.  While the request
    thinks (`request.think`), the grammar starts after the think end."""
    asked = grammar_request(body)
    forced = fmt is not None and forces_call(body)
    if asked is not None and forced:
        raise errors.invalid("A structured-output grammar cannot be combined with a forced tool call "
                             "(tool_choice \"required\" or a named function)", param="tool_choice")
    if asked is None and not forced:
        return request
    kind, value, field = asked or ("ebnf", None, "tools")
    if asked is not None:
        check_grammar(field, value, limits)
    try:
        spec = GrammarSpec.of(kind, value) if asked is not None else forced_call_spec(body, offered(body), fmt)
        if spec is None:
            return request
        compiler = await asyncio.to_thread(engine.grammar_compiler, limits.grammar_seconds)
        # cancelling this task (the client left) cancels the future: this request leaves the compile
        compiled = await asyncio.wrap_future(compiler.compile_async(spec))
        constraint = compiler.constraint_for(compiled, request.think)
    except GrammarUnavailable as exc:
        raise errors.invalid(str(exc), param=field) from exc
    except GrammarBusy as exc:
        raise errors.busy(f"The server is busy compiling grammars ({exc}); retry the request shortly",
                          param=field) from exc
    except GrammarTimeout as exc:
        raise errors.invalid(f"Invalid '{field}': {exc}; send a smaller or simpler grammar",
                             param=field) from exc
    except GrammarError as exc:
        raise errors.invalid(f"Invalid '{field}': the grammar does not compile: {exc.reason or exc}",
                             param=field) from exc
    # a thinking budget's close stops at the think end: the grammar writes what follows
    rules = tuple(c.stop_at_marker() if isinstance(c, ThinkingBudget) else c for c in request.constraints
                  if not isinstance(c, ToolForce))
    return dataclasses.replace(request, constraints=(*rules, constraint))
