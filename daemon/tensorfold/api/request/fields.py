"""Field types for the request schemas: one validator per rule in SPEC.md.

Each type is an `Annotated` alias whose `BeforeValidator` sees the raw JSON
value and either returns the clean value or raises `PydanticCustomError`.
The error's type names the error code the client gets (see parsing.py):
"invalid_value" for a malformed value, "unsupported_parameter" for a feature
this server does not run (refused loudly rather than silently ignored).

Numbers: booleans, strings (numeric or not), NaN and infinities are refused;
integral fields accept integral floats (2.0 is 2) and refuse 2.5.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from .. import errors

INT32 = 1 << 31
SEED_MIN, SEED_LIMIT = -(1 << 63), 1 << 64


def fail(message: str, code: str = errors.INVALID_VALUE) -> NoReturn:
    # Pydantic formats the message with str.format-style `{}` context: escape braces.
    raise PydanticCustomError(code, message.replace("{", "{{").replace("}", "}}"))


def unsupported(message: str) -> NoReturn:
    fail(message, errors.UNSUPPORTED)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def number(value: Any, *, integral: bool = False) -> int | float:
    """A finite JSON number; an int when `integral`."""
    want = "an integer" if integral else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(f"must be {want}, not {_kind(value)}")
    if isinstance(value, float):
        if not math.isfinite(value):
            fail(f"must be a finite number, not {value}")
        if integral:
            if not value.is_integer():
                fail(f"must be an integer, not {value}")
            return int(value)
    elif not integral and abs(value) > sys.float_info.max:
        fail(f"must be a finite number; {len(str(abs(value)))} digits is beyond a float")
    return value


def _bounded(ok: Callable[[float], bool], rule: str) -> Callable[[Any], float | None]:
    """A validator of an optional number that must satisfy `ok` (`rule` says how)."""
    def parse(v: Any) -> float | None:
        if v is None:
            return None
        x = number(v)
        if not ok(x):
            fail(f"must be {rule}, not {x}")
        return float(x)
    return parse


_temperature = _bounded(lambda x: x >= 0, "at least 0 (0 is greedy)")
_top_p = _bounded(lambda x: 0 < x <= 1, "greater than 0 and at most 1")
_min_p = _bounded(lambda x: 0 <= x <= 1, "between 0 and 1 (0 is off)")
# frequency_penalty / presence_penalty: OpenAI's range; repetition_penalty: vLLM's
_penalty = _bounded(lambda x: -2 <= x <= 2, "between -2 and 2 (0 is off)")
_repetition_penalty = _bounded(lambda x: 0 < x <= 100, "greater than 0 and at most 100 (1 is off)")


def _logit_bias(v: Any) -> dict[int, float] | None:
    """OpenAI's logit_bias: token id (a JSON key) -> a number from -100 to 100."""
    if v is None:
        return None
    if not isinstance(v, dict):
        fail(f"must be an object mapping token ids to numbers, not {_kind(v)}")
    out: dict[int, float] = {}
    for key, bias in v.items():
        if not isinstance(key, str) or not key.isdigit():
            fail(f"keys must be token ids (digit strings), not {key!r}")
        b = number(bias)
        if not -100 <= b <= 100:
            fail(f"the bias of token {key} must be between -100 and 100, not {b}")
        out[int(key)] = float(b)
    return out


def _top_k(v: Any) -> int | None:
    if v is None:
        return None
    k = int(number(v, integral=True))
    if not -INT32 <= k < INT32:
        fail(f"must fit in 32 bits (0 or below is off), not {k}")
    return k


def _seed(v: Any) -> int | None:
    if v is None:
        return None
    s = int(number(v, integral=True))
    if not SEED_MIN <= s < SEED_LIMIT:
        fail(f"must be an integer from -2**63 to 2**64 - 1, not {s}")
    return s


def _positive_int(v: Any) -> int | None:
    if v is None:
        return None
    n = int(number(v, integral=True))
    if n < 1:
        fail(f"must be a positive integer, not {n}")
    return n


def _bool(v: Any) -> bool | None:
    if v is None or isinstance(v, bool):
        return v
    fail(f"must be a boolean (true or false), not {_kind(v)}")


def _stop(v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list):
        fail(f"must be a string or an array of strings, not {_kind(v)}")
    for i, s in enumerate(items):
        if not isinstance(s, str):
            fail(f"item {i} must be a string, not {_kind(s)}")
        if not s:
            fail("stop strings must not be empty" if isinstance(v, list) else "must not be an empty string")
    return tuple(items)


def _template_kwargs(v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        fail(f"must be an object or null, not {_kind(v)}")
    return v


def _priority(v: Any) -> str | None:
    if v is None or v in ("foreground", "background"):
        return v
    fail(f'must be "foreground", "background" or null, not {v!r}')


def only_one(v: Any, refusal: str) -> int | None:
    """A count this server runs only at 1: below 1 is malformed, above it `refusal`."""
    if v is None:
        return None
    n = int(number(v, integral=True))
    if n < 1:
        fail(f"must be 1, not {n}")
    if n > 1:
        unsupported(refusal)
    return n


def off_only(v: Any, refusal: str) -> bool | None:
    """A switch this server runs only off: true is `refusal`, anything but a boolean malformed."""
    if v is None or v is False:
        return v
    if v is True:
        unsupported(refusal)
    fail(f"must be a boolean, not {_kind(v)}")


def _n(v: Any) -> int | None:
    return only_one(v, "several choices (n > 1) are not supported; send n: 1 or omit it")


def _model(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    fail(f"must be a string, not {_kind(v)}")


def _must_be_null(feature: str):
    def check(v: Any) -> None:
        if v is not None:
            unsupported(f"{feature} is not supported by this server")
        return None
    return check


def _modalities(v: Any) -> list[str] | None:
    if v is None or v == ["text"]:
        return v
    if not isinstance(v, list) or not all(isinstance(m, str) for m in v):
        fail("must be an array of strings")
    unsupported('only text output is supported; send modalities: ["text"] or omit it')


Temperature = Annotated[float | None, BeforeValidator(_temperature)]
TopP = Annotated[float | None, BeforeValidator(_top_p)]
TopK = Annotated[int | None, BeforeValidator(_top_k)]
MinP = Annotated[float | None, BeforeValidator(_min_p)]
Penalty = Annotated[float | None, BeforeValidator(_penalty)]
RepetitionPenalty = Annotated[float | None, BeforeValidator(_repetition_penalty)]
LogitBias = Annotated[dict[int, float] | None, BeforeValidator(_logit_bias)]
Seed = Annotated[int | None, BeforeValidator(_seed)]
PositiveInt = Annotated[int | None, BeforeValidator(_positive_int)]
OptionalBool = Annotated[bool | None, BeforeValidator(_bool)]
Stop = Annotated[tuple[str, ...], BeforeValidator(_stop)]
TemplateKwargs = Annotated[dict[str, Any] | None, BeforeValidator(_template_kwargs)]
PriorityName = Annotated[str | None, BeforeValidator(_priority)]
N = Annotated[int | None, BeforeValidator(_n)]
ModelName = Annotated[str | None, BeforeValidator(_model)]
Modalities = Annotated[list[str] | None, BeforeValidator(_modalities)]


def MustBeNull(feature: str) -> Any:  # noqa: N802 (a type factory)
    return Annotated[Any, BeforeValidator(_must_be_null(feature))]


