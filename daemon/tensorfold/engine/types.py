"""Boundary types between the HTTP edge and the engine thread.

Nothing here imports torch, Quart or pydantic: these are plain values that the
API builds (`Request`) and the engine emits (`Delta`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class Priority(str, enum.Enum):
    FOREGROUND = "foreground"
    BACKGROUND = "background"


@dataclass(slots=True, frozen=True)
class SamplingParams:
    """The keyed sampling rule's settings (see engine/sampler.py).

    temperature 0 is greedy (argmax, lowest id on ties); top_k <= 0 is off;
    top_p 1 is off; min_p 0 is off. `seed` is always resolved before the
    request reaches the engine (the request's, or one derived from the prompt).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int = 0


def find_marker(tokens: Sequence[int], marker: Sequence[int]) -> int:
    """Index of the first occurrence of `marker` (a token sequence) in `tokens`, or -1."""
    n, marker = len(marker), list(marker)
    if n == 0:
        return -1
    return next((i for i in range(len(tokens) - n + 1) if list(tokens[i:i + n]) == marker), -1)


@dataclass(slots=True, frozen=True)
class Think:
    """A think block's markers as tokens, and whether the prompt already opened it."""

    opener: tuple[int, ...]
    close: tuple[int, ...]
    inside: bool = False

    @property
    def reply_opener(self) -> int | None:
        """The token a reply may open its own block with, at its first position:
        None when the prompt opened the block, or when the opener is several
        tokens (then it cannot be told from answer text)."""
        return self.opener[0] if not self.inside and len(self.opener) == 1 else None

    def reasoning_tokens(self, reply: list[int]) -> int:
        """Reply tokens spent thinking, through the closing marker."""
        if not self.inside and find_marker(reply, self.opener) != 0:
            return 0              # the block only counts at the start of the reply
        end = find_marker(reply, self.close)
        return len(reply) if end < 0 else end + len(self.close)


@dataclass(slots=True)
class Request:
    id: str
    prompt: list[int]                  # rendered prompt token ids
    sampling: SamplingParams
    max_tokens: int                    # reply limit, already fitted to the window
    stop: tuple[str, ...] = ()         # stop strings, matched on the reply text
    ignore_eos: bool = False
    priority: Priority = Priority.FOREGROUND
    draft: bool = True                 # False: the serial reference, one position a round
    constraints: tuple[Any, ...] = ()  # engine.constraints rules, applied per row
    think: Think | None = None         # how to count reasoning tokens; None: no thinking
    images: tuple[Any, ...] = ()       # vision.positions.Placed: an image's embeddings at prompt positions


class FinishReason(str, enum.Enum):
    STOP = "stop"          # end token or stop string
    LENGTH = "length"      # reply limit
    ABORT = "abort"        # client went away
    ERROR = "error"        # generation failed


@dataclass(slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class Stats:
    """Per-reply statistics for the `tensorfold` block of a response."""

    token_sha: str                      # sha256 over the reply's token ids
    time_to_first_token: float          # seconds from submit to first token
    prefill_seconds: float
    decode_seconds: float
    decode_tokens_per_second: float | None   # tokens after the first / decode time
    queued_seconds: float = 0.0
    drafted: int = 0                         # draft tokens proposed for this reply
    accepted: int = 0                        # of those, the ones verification kept


@dataclass(slots=True)
class Finish:
    reason: FinishReason
    usage: Usage
    stats: Stats
    stop_string: str | None = None      # the stop string that ended the reply
    error: str | None = None            # message when reason is ERROR
    refused: bool = False               # ERROR because this server cannot take the request (a 400)


@dataclass(slots=True)
class Delta:
    """What one round produced for one request.

    `text` is reply text safe to send (stop-string holdback applied);
    `token_ids` are the tokens accepted this round; `finish` is set on the
    request's last delta, after which nothing more is sent.
    """

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish: Finish | None = None
