"""From request bytes to a validated schema, or an APIError naming the field.

JSON is parsed with the standard library but without its extensions: the
literals NaN, Infinity and -Infinity are refused, as is a number too large
for a float (1e400 would otherwise become inf).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from functools import cache
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ...config import Limits
from .. import errors
from ..errors import APIError
from .names import field_name

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
log = logging.getLogger(__name__)

# pydantic error types -> (our message, our code); the rest keep pydantic's message.
_MESSAGES = {
    "missing": ("is required", errors.MISSING),
    "model_type": ("must be an object", errors.INVALID_VALUE),
    "dict_type": ("must be an object", errors.INVALID_VALUE),
    "list_type": ("must be an array", errors.INVALID_VALUE),
    "string_type": ("must be a string", errors.INVALID_VALUE),
    "bool_type": ("must be a boolean", errors.INVALID_VALUE),
}
_CODES = {errors.UNSUPPORTED, errors.INVALID_VALUE}


# A surrogate reaches a parsed string only through a \uD800-\uDFFF escape (UTF-8 bytes
# cannot encode one): bodies without such an escape skip the per-string check.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _unencodable(text: str) -> bool:
    """A lone surrogate (JSON's \\ud800 escape alone): text no UTF-8 can carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class _TooDeep:
    pass


def _first_invalid(value: Any, strings: bool, depth: int) -> tuple[tuple[str | int, ...], Any] | None:
    """The location and value of the first NaN, infinity or (when `strings`) string or key
    with a lone surrogate in a parsed body, or of the first array or object nested past
    `depth` (as _TooDeep)."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        where, v = stack.pop()
        if len(where) > depth:
            return where[:2], _TooDeep()                 # named by its field, not `depth` levels of path
        if isinstance(v, float) and not math.isfinite(v):
            return where, v
        if strings and isinstance(v, str) and _unencodable(v):
            return where, v
        if isinstance(v, dict):
            for k in v if strings else ():
                if _unencodable(k):
                    return where, k
            stack.extend((where + (k,), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((where + (i,), x) for i, x in reversed(list(enumerate(v))))
    return None


def too_deep(value: Any, depth: int) -> bool:
    """Whether any value sits more than `depth` arrays and objects deep (a quick walk)."""
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        if d >= depth:
            if v:
                return True
            continue
        stack.extend((x, d + 1) for x in v if isinstance(x, (dict, list)))
    return False


def loads_bounded(text: str, depth: int = Limits().depth) -> Any:
    """JSON text inside a body (tool-call arguments): its value; ValueError when it is not
    JSON or nests arrays and objects more than `depth` deep."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep") from None
    if too_deep(value, depth):
        raise ValueError("nested too deep")
    return value


def parse_json_object(data: bytes, depth: int = Limits().depth) -> dict[str, Any]:
    """The request body as a JSON object, or a 400.

    Python's json module reads the NaN, Infinity and -Infinity literals and
    turns 1e400 into inf; JSON has none of them, so any non-finite number,
    wherever it sits, is refused here with its location as `param`; so is a
    string with a lone surrogate escape, which no UTF-8 text can carry, and arrays and
    objects nested more than `depth` deep (a recursion error otherwise, further on)."""
    if not data.strip():
        raise errors.invalid("The request body is empty; send a JSON object", code=errors.INVALID_JSON)
    odd: list[str] = []             # non-finite numbers seen while parsing

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            odd.append(text)
        return value

    try:
        # strict UTF-8 (RFC 8259): json.loads would take UTF-16/32, and UTF-8-encoded surrogates
        body = json.loads(data.decode("utf-8"), parse_float=number, parse_constant=number)
    except UnicodeDecodeError as exc:
        raise errors.invalid(f"The request body is not valid UTF-8: {exc}", code=errors.INVALID_JSON) from None
    except (ValueError, RecursionError) as exc:   # JSONDecodeError is a ValueError
        raise errors.invalid(f"The request body is not valid JSON: {exc}", code=errors.INVALID_JSON) from None
    if not isinstance(body, dict):
        raise errors.invalid(f"The request body must be a JSON object, not {type(body).__name__}",
                             code=errors.INVALID_JSON)
    strings = _SURROGATE_ESCAPE.search(data) is not None
    if not (odd or strings or too_deep(body, depth)):
        return body
    bad = _first_invalid(body, strings, depth)
    if bad is not None:
        param = param_name(bad[0])
        if isinstance(bad[1], _TooDeep):
            raise errors.invalid(f"Invalid '{param}': arrays and objects nest more than {depth} deep "
                                 "(the server's --limit depth=N)", param=param)
        if isinstance(bad[1], str):
            raise errors.invalid(f"Invalid '{param}': a string holds a lone UTF-16 surrogate escape "
                                 "(\\ud800-\\udfff without its pair)", param=param)
        shown = "NaN" if math.isnan(bad[1]) else ("Infinity" if bad[1] > 0 else "-Infinity")
        raise errors.invalid(f"Invalid '{param}': must be a finite number, not {shown}", param=param)
    return body


def param_name(loc: tuple[str | int, ...]) -> str | None:
    """('messages', 0, 'content') -> 'messages[0].content'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def validate(model: type[M], body: dict[str, Any]) -> M:
    """`model` validated from `body`; the first error becomes a 400 naming its field.
    A model with an `_ignored` attribute gets the body's fields it has no field for
    (each logged once per process)."""
    try:
        out = model.model_validate(body)
    except ValidationError as exc:
        raise error_from(exc) from None
    if "_ignored" in getattr(model, "__private_attributes__", {}):
        known = _known_fields(model)
        ignored = tuple(sorted(k for k in body if k not in known))
        out._ignored = ignored
        for name in set(ignored) - _LOGGED:
            _LOGGED.add(name)
            log.warning("request field %r is not one this server knows: ignored (listed in the reply's "
                        "tensorfold.ignored_fields)", name)
    return out


_LOGGED: set[str] = set()


@cache
def _known_fields(model: type[BaseModel]) -> frozenset[str]:
    """The body keys `model` takes: its fields, their aliases and what it passes through."""
    names = {f.alias or name for name, f in model.model_fields.items()} | set(model.model_fields)
    return frozenset(names | set(getattr(model, "PASS_THROUGH", ())))


def error_from(exc: ValidationError) -> APIError:
    first = exc.errors(include_url=False, include_input=False)[0]
    # Locations of union members and tagged choices are type names, not fields.
    loc = tuple(p for p in first["loc"] if isinstance(p, int) or not _is_type_tag(p))
    param = param_name(loc)
    if param is not None:
        param = field_name(param)
    kind = first["type"]
    if kind in _MESSAGES:
        text, code = _MESSAGES[kind]
    else:
        text, code = first["msg"], (kind if kind in _CODES else errors.INVALID_VALUE)
    where = f"'{param}'" if param else "the request"
    if code == errors.MISSING:
        return errors.invalid(f"Missing required parameter: {where}", param=param, code=code)
    if code == errors.UNSUPPORTED:
        text = text[:1].upper() + text[1:]
        return errors.APIError(f"{text} ('{param}')" if param else text, param=param, code=code)
    return errors.invalid(f"Invalid {where}: {text}", param=param, code=code)


def _is_type_tag(part: str) -> bool:
    return any(c in part for c in "[]()") or part in ("str", "int", "float", "bool", "dict", "list")


OFF_LOOP_BYTES = 64 * 1024    # bodies this large are parsed on a worker thread, not the event loop


async def read_body(depth: int) -> dict[str, Any]:
    """The current request's body as a JSON object (413 past MAX_CONTENT_LENGTH); a large
    one is parsed off the event loop, so other requests (and /health) are not held up."""
    from quart import request

    data = await request.get_data(cache=False)
    if len(data) >= OFF_LOOP_BYTES:
        return await asyncio.to_thread(parse_json_object, data, depth)
    return parse_json_object(data, depth)


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on a worker thread, with the request's context: validation, rendering and
    tokenization run there, so a large request never holds up the event loop."""
    return await asyncio.to_thread(fn, *args)
