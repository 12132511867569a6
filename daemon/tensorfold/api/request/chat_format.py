"""A served model's chat format, read once at start from its tokenizer and chat template:
the tool-call format (tool_prompt.py), the reasoning markers as text and as tokens, and
the fill-in-the-middle tokens. Every request of the server reads it from here instead
of sniffing the template again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...parsers import REASONING_MARKERS, reasoning_for_template, starts_in_reasoning
from .tool_prompt import ToolFormat, tool_format


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A template's think block: its opener and close as text and as tokens, and the
    tokens a thinking budget writes to close it early."""

    name: str                       # parsers.REASONING_MARKERS key
    opener: str
    close: str
    opener_ids: tuple[int, ...]
    close_ids: tuple[int, ...]
    budget_close_ids: tuple[int, ...]       # "\n" + close + "\n\n"


@dataclass(frozen=True, slots=True)
class ChatFormat:
    template: str                   # the chat template ("" without one)
    tools: ToolFormat
    reasoning: Reasoning | None     # None: the template does not think
    fim_ids: tuple[int, int, int] | None    # prefix, suffix, middle; None without FIM tokens

    @classmethod
    def of(cls, tokenizer: Any, tool_parser: str | None) -> ChatFormat:
        template = getattr(tokenizer, "chat_template", "") or ""
        name = reasoning_for_template(template)
        reasoning = None
        if name is not None:
            opener, close = REASONING_MARKERS[name]
            reasoning = Reasoning(name, opener, close, tuple(tokenizer.encode(opener)), tuple(tokenizer.encode(close)),
                                  tuple(tokenizer.encode("\n" + close + "\n\n")))
        return cls(template, tool_format(template, tool_parser), reasoning, getattr(tokenizer, "fim_ids", None))

    def starts_in_reasoning(self, tokenizer: Any, prompt: list[int]) -> bool:
        """Whether `prompt` ends inside an open think block (the template opened it)."""
        assert self.reasoning is not None
        return starts_in_reasoning(tokenizer.decode(prompt[-16:]), self.reasoning.opener)
