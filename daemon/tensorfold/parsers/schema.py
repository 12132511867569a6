"""Offered tools, and typing text parameter values by their schema.

Formats that write each parameter as text (Qwen XML, GLM) need the offered
schema to know that `5` is the integer 5 and not the string "5". The rule
(SPEC): a parameter whose schema property has an explicit `type` of array,
object, boolean, integer, number or null is converted; anything else (string,
no type, a union list of types, `$ref`, `anyOf`, an unknown parameter) stays
the text. A value that does not read as its type stays the text too, for the
client to validate.

| type    | accepted text (surrounding whitespace ignored)          | else   |
|---------|---------------------------------------------------------|--------|
| integer | `-?[0-9]+`                                              | string |
| number  | a JSON number (int if it has no `.`/exponent), finite   | string |
| boolean | `true` / `false`, any letter case (templates that write  | string |
|         | values with Jinja's `string` filter render `True`)       |        |
| null    | `null` / `None`                                          | string |
| array   | JSON text of an array                                    | string |
| object  | JSON text of an object                                   | string |
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

CONVERTED = frozenset({"array", "object", "boolean", "integer", "number", "null"})

_INT = re.compile(r"-?[0-9]+")
_NUM = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def tool_schemas(tools: Iterable[Mapping[str, Any]] | Mapping[str, Any] | None) -> dict[str, dict]:
    """Offered tools as {name: parameters schema}.

    Takes OpenAI tools ({"type": "function", "function": {"name", "parameters"}}),
    bare function objects ({"name", "parameters"}), or an existing
    {name: schema} mapping. Entries without a string name are skipped."""
    if tools is None:
        return {}
    if isinstance(tools, Mapping):
        return {str(k): dict(v) if isinstance(v, Mapping) else {} for k, v in tools.items()}
    out: dict[str, dict] = {}
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        fn = tool.get("function", tool)
        if not isinstance(fn, Mapping):
            continue
        name = fn.get("name")
        if isinstance(name, str) and name:
            params = fn.get("parameters")
            out[name] = dict(params) if isinstance(params, Mapping) else {}
    return out


def param_type(schema: Mapping[str, Any] | None, key: str) -> str | None:
    """The explicit converted type of parameter `key`, or None (stays a string)."""
    if not schema:
        return None
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return None
    prop = props.get(key)
    if not isinstance(prop, Mapping):
        return None
    t = prop.get("type")
    return t if isinstance(t, str) and t in CONVERTED else None


def _no_constants(name: str) -> Any:
    raise ValueError(name)


def _finite(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(text)
    return v


def convert(text: str, t: str | None) -> Any:
    """`text` as type `t` (see the table above), or `text` itself."""
    if t is None:
        return text
    s = text.strip()
    if t == "integer":
        return int(s) if _INT.fullmatch(s) else text
    if t == "number":
        m = _NUM.fullmatch(s)
        if not m:
            return text
        if m.group(1) is None and m.group(2) is None:
            return int(s)
        v = float(s)
        return v if math.isfinite(v) else text
    if t == "boolean":
        low = s.lower()
        return True if low == "true" else False if low == "false" else text
    if t == "null":
        return None if s.lower() in ("null", "none") else text
    try:
        v = loads(s)
    except (ValueError, RecursionError):
        return text
    if t == "array":
        return v if isinstance(v, list) else text
    return v if isinstance(v, dict) else text


def call_from_json(obj: Any, tools: Mapping[str, dict], *, need_arguments: bool) -> tuple[str, dict] | None:
    """(name, arguments) when obj is a call to an offered tool, else None.

    A call is {"name": NAME, "arguments": {...}} ("parameters" is read as
    "arguments"; arguments given as JSON text of an object are read too).
    Without need_arguments a missing arguments field means {}."""
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or name not in tools:
        return None
    if "arguments" in obj:
        args = obj["arguments"]
    elif "parameters" in obj:
        args = obj["parameters"]
    elif need_arguments:
        return None
    else:
        args = {}
    if isinstance(args, str):
        try:
            args = loads(args)
        except (ValueError, RecursionError):
            return None
    if not isinstance(args, dict):
        return None
    return name, args


def loads(text: str) -> Any:
    """json.loads without NaN, Infinity or overflowing numbers; raises ValueError."""
    try:
        return json.loads(text, parse_constant=_no_constants, parse_float=_finite)
    except RecursionError:
        raise ValueError("too deep") from None
