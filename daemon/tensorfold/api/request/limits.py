"""The server's request limits (config.Limits), checked on a parsed body before
validation, so an oversized request costs no validation, rendering or tokenization.

Each refusal is a 400 naming the field and the `--limit NAME=VALUE` that raises it.
Values of the wrong type are left to validation, which names them better. The
body size (413) is Quart's MAX_CONTENT_LENGTH; nesting depth is checked while
parsing (parsing.py); grammar sizes where the grammar is chosen (structured.py).
"""

from __future__ import annotations

import json
from typing import Any

from ...config import Limits
from .. import errors


def _refuse(param: str, text: str, name: str) -> errors.APIError:
    return errors.invalid(f"Invalid '{param}': {text} (the server's --limit {name}=N)", param=param)


def _chars(value: Any) -> int:
    """The characters of every string in `value` (keys excluded)."""
    total, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return total


def _check_text(param: str, value: Any, limits: Limits) -> None:
    n = _chars(value)
    if n > limits.message_chars:
        raise _refuse(param, f"holds {n} characters; at most {limits.message_chars} are allowed",
                      "message_chars")


def _check_items(param: str, items: Any, limits: Limits, what: str) -> None:
    if not isinstance(items, list):
        return
    if len(items) > limits.messages:
        raise _refuse(param, f"{len(items)} {what}; at most {limits.messages} are allowed per request",
                      "messages")
    for i, item in enumerate(items):
        _check_text(f"{param}[{i}]", item, limits)


def _check_stop(raw: dict[str, Any], limits: Limits) -> None:
    stop = raw.get("stop")
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, list):
        return
    if len(items) > limits.stop_strings:
        raise _refuse("stop", f"takes at most {limits.stop_strings} stop strings, not {len(items)}",
                      "stop_strings")
    for s in items:
        if isinstance(s, str) and len(s) > limits.stop_chars:
            raise _refuse("stop", f"stop strings are at most {limits.stop_chars} characters, not {len(s)}",
                          "stop_chars")


def check_generation(raw: dict[str, Any], limits: Limits) -> None:
    """A chat or completions body: messages, prompt, suffix and stop strings."""
    _check_items("messages", raw.get("messages"), limits, "messages")
    for field in ("prompt", "suffix"):
        if isinstance(raw.get(field), (str, list)):
            _check_text(field, raw[field], limits)
    _check_stop(raw, limits)


def check_responses(raw: dict[str, Any], limits: Limits) -> None:
    """A Responses body: its input items (or input text) and instructions."""
    if isinstance(raw.get("input"), str):
        _check_text("input", raw["input"], limits)
    _check_items("input", raw.get("input"), limits, "input items")
    if isinstance(raw.get("instructions"), str):
        _check_text("instructions", raw["instructions"], limits)


def check_grammar(field: str, value: Any, limits: Limits) -> None:
    """A structured-output value (schema, regex, grammar or choice list) by its UTF-8 size."""
    if isinstance(value, str):
        size = len(value.encode("utf-8", "surrogatepass"))
    else:
        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    if size > limits.grammar_bytes:
        raise _refuse(field, f"the grammar is {size} bytes; at most {limits.grammar_bytes} are allowed",
                      "grammar_bytes")
