"""Reply objects as OpenAI returns them, built from engine `Finish` values.

`ChatShape` writes chat.completion / chat.completion.chunk objects and
`CompletionShape` text_completion ones; generation.py drives either. Every
reply carries `usage` (with cached and reasoning token details) and a
top-level `tensorfold` block of generation statistics: a whole reply in its
body, a stream on its finish chunk (the last one with `choices`), and again
on the `choices: []` chunk that follows it when the client asked for
stream_options.include_usage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ...engine.types import Finish, FinishReason, Stats, Usage
from .chat_reply import ChatReply

FINISH_REASONS = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length"}


def chat_usage_json(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def _finite(x: float | None) -> float | None:
    """JSON has no NaN or infinity: such a statistic is reported as null."""
    return x if x is not None and math.isfinite(x) else None


def stats_json(stats: Stats, ignored: tuple[str, ...] = ()) -> dict[str, Any]:
    """The `tensorfold` block: generation statistics, and the request's `ignored` fields
    (those no schema field takes) when there are any."""
    block: dict[str, Any] = {
        "token_sha": stats.token_sha,
        "time_to_first_token": _finite(stats.time_to_first_token),
        "decode_tokens_per_second": _finite(stats.decode_tokens_per_second),
        "prefill_seconds": _finite(stats.prefill_seconds),
        "decode_seconds": _finite(stats.decode_seconds),
        "queued_seconds": _finite(stats.queued_seconds),
        "drafted": stats.drafted,
        "accepted": stats.accepted,
    }
    if ignored:
        block["ignored_fields"] = list(ignored)
    return block


def totals(finish: Finish, ignored: tuple[str, ...] = ()) -> dict[str, Any]:
    """`usage` and the `tensorfold` statistics block: what a whole reply, a
    stream's finish chunk and its include_usage chunk each carry."""
    return {"usage": chat_usage_json(finish.usage), "tensorfold": stats_json(finish.stats, ignored)}


def finish_reason(finish: Finish) -> str:
    return FINISH_REASONS[finish.reason]


@dataclass(slots=True)
class ChatShape:
    id: str
    model: str
    created: int
    reply: ChatReply = field(default_factory=lambda: ChatReply(None))
    ignored: tuple[str, ...] = ()

    def _reason(self, finish: Finish) -> str:
        """"tool_calls" when the reply called a tool, unless the token limit cut it ("length")."""
        reason = finish_reason(finish)
        return "tool_calls" if self.reply.calls and reason != "length" else reason

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self, text: str, finish: Finish) -> dict[str, Any]:
        message = self.reply.message(text)
        choice = {"index": 0, "message": message, "finish_reason": self._reason(finish), "logprobs": None}
        return {**self._head("chat.completion"), "choices": [choice], **totals(finish, self.ignored)}

    def _chunk(self, delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}
        return {**self._head("chat.completion.chunk"), "choices": [choice]}

    def first_chunk(self) -> dict[str, Any] | None:
        return self._chunk({"role": "assistant", "content": ""})

    def text_chunks(self, text: str) -> list[dict[str, Any]]:
        return [self._chunk(delta) for delta in self.reply.feed(text)]

    def end_chunks(self) -> list[dict[str, Any]]:
        return [self._chunk(delta) for delta in self.reply.end()]

    def finish_chunk(self, finish: Finish) -> dict[str, Any]:
        return {**self._chunk({}, self._reason(finish)), **totals(finish, self.ignored)}

    def usage_chunk(self, finish: Finish) -> dict[str, Any]:
        return {**self._head("chat.completion.chunk"), "choices": [], **totals(finish, self.ignored)}


@dataclass(slots=True, frozen=True)
class CompletionShape:
    id: str
    model: str
    created: int
    ignored: tuple[str, ...] = ()

    def _head(self) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model}

    def _choice(self, text: str, reason: str | None) -> dict[str, Any]:
        return {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}

    def whole(self, text: str, finish: Finish) -> dict[str, Any]:
        choice = self._choice(text, finish_reason(finish))
        return {**self._head(), "choices": [choice], **totals(finish, self.ignored)}

    def first_chunk(self) -> dict[str, Any] | None:
        return None

    def text_chunks(self, text: str) -> list[dict[str, Any]]:
        return [{**self._head(), "choices": [self._choice(text, None)]}] if text else []

    def end_chunks(self) -> list[dict[str, Any]]:
        return []

    def finish_chunk(self, finish: Finish) -> dict[str, Any]:
        return {**self._head(), "choices": [self._choice("", finish_reason(finish))], **totals(finish, self.ignored)}

    def usage_chunk(self, finish: Finish) -> dict[str, Any]:
        return {**self._head(), "choices": [], **totals(finish, self.ignored)}
