"""The reasoning-effort rule: which thinking switch and effort the chat template hears.

- `reasoning_effort` (top level) wins over `chat_template_kwargs.reasoning_effort`
  (where vLLM's clients send it); without either, the server's
  --reasoning-effort; without that, the template renders its own default.
- `none` turns thinking off; any other effort turns it on and reaches the
  template, unless `chat_template_kwargs.enable_thinking` says otherwise (an
  explicit switch wins). The template hears an effort only while thinking.
- `high` maps to `xhigh` and `minimal` to `low`, unless the template names
  the value itself (a template that offers "high" gets "high").
- Effort sets no token budget.
"""

from __future__ import annotations

from typing import Any

from .. import errors
from .chat_format import ChatFormat

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
MAPPED = {"high": "xhigh", "minimal": "low"}


def check_effort(value: Any, param: str) -> str | None:
    if value is None or (isinstance(value, str) and value in EFFORTS):
        return value
    raise errors.invalid(f"Invalid '{param}': must be one of {', '.join(EFFORTS)}, not {value!r}", param=param)


def template_effort(effort: str, template: str) -> str:
    """The effort as this template spells it."""
    named = f"'{effort}'" in template or f'"{effort}"' in template
    return effort if named or effort not in MAPPED else MAPPED[effort]


def effort_kwargs(kwargs: dict[str, Any], effort: str | None, default: str | None,
                  template: str) -> dict[str, Any]:
    """chat_template_kwargs after the effort rule (a new dict; the caller's is not changed)."""
    out = dict(kwargs)
    from_kwargs = check_effort(out.pop("reasoning_effort", None), "chat_template_kwargs.reasoning_effort")
    effort = effort or from_kwargs or default
    if effort is None:
        return out
    out.setdefault("enable_thinking", effort != "none")
    if effort != "none" and out["enable_thinking"] is not False:
        out["reasoning_effort"] = template_effort(effort, template)
    return out


def thinking_budget_rule(fmt: ChatFormat, think: Any, budget: int | None, default: int | None) -> Any:
    """The ThinkingBudget constraint for a request that thinks (`think`: its think_markers),
    or None (no budget, or the request does not think)."""
    from ...engine.constraints import ThinkingBudget

    budget = budget or default
    if not budget or think is None:
        return None
    r = fmt.reasoning
    return ThinkingBudget(budget, r.budget_close_ids, r.close_ids, r.opener_ids, think.inside)


def think_markers(fmt: ChatFormat, tokenizer: Any, kwargs: dict[str, Any], prompt: list[int]) -> Any:
    """The engine's Think (markers as tokens) when this request thinks; None otherwise."""
    from ...engine.types import Think

    r = fmt.reasoning
    if r is None or kwargs.get("enable_thinking") is False:
        return None
    return Think(r.opener_ids, r.close_ids, fmt.starts_in_reasoning(tokenizer, prompt))
