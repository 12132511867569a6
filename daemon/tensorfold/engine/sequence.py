"""One request's state on the engine thread."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .text import ReplyText
from .types import Delta, Finish, FinishReason, Request, Stats, Usage


@dataclass(slots=True)
class Sequence:
    request: Request
    emit: Callable[[Delta], None]
    text: ReplyText
    eos_ids: frozenset[int]
    kv: Any = None                       # the backend's KV handle while running
    generated: list[int] = field(default_factory=list)
    prefilled: bool = False
    aborted: bool = False                # set from the client's thread
    done: bool = False
    t_submit: float = field(default_factory=time.perf_counter)
    t_start: float = 0.0                 # admitted to a lane
    t_first: float = 0.0                 # first reply token sampled
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0

    @property
    def position(self) -> int:
        """Absolute position of the next token to feed (prompt + reply so far - 1)."""
        return len(self.request.prompt) + len(self.generated) - 1

    def accept(self, token: int) -> Delta:
        """Append one sampled token; return the delta to send (finished when the reply ends)."""
        self.generated.append(token)
        req = self.request
        if token in self.eos_ids and not req.ignore_eos:
            return self.finish(FinishReason.STOP, self.text.finish(), new_tokens=[token])
        step = self.text.push(token)
        if step.stopped:
            return self.finish(FinishReason.STOP, step.text, step.stop_string, new_tokens=[token])
        if len(self.generated) >= req.max_tokens:
            return self.finish(FinishReason.LENGTH, step.text + self.text.finish(), new_tokens=[token])
        return Delta(text=step.text, token_ids=[token])

    def finish(self, reason: FinishReason, text: str = "", stop_string: str | None = None,
               error: str | None = None, new_tokens: list[int] | None = None) -> Delta:
        self.done = True
        tokens = self.generated
        n_decode = max(len(tokens) - 1, 0)
        stats = Stats(
            token_sha=token_sha(tokens),
            time_to_first_token=(self.t_first - self.t_submit) if self.t_first else 0.0,
            prefill_seconds=self.prefill_seconds,
            decode_seconds=self.decode_seconds,
            decode_tokens_per_second=(n_decode / self.decode_seconds) if self.decode_seconds > 0 else None,
            queued_seconds=(self.t_start - self.t_submit) if self.t_start else 0.0,
        )
        usage = Usage(prompt_tokens=len(self.request.prompt), completion_tokens=len(tokens))
        fin = Finish(reason=reason, usage=usage, stats=stats, stop_string=stop_string, error=error)
        return Delta(text=text, token_ids=new_tokens or [], finish=fin)


def token_sha(tokens: list[int]) -> str:
    """SHA-256 over the reply's token ids, each as 4 little-endian bytes."""
    return hashlib.sha256(b"".join(t.to_bytes(4, "little") for t in tokens)).hexdigest()
