"""One request's state on the engine thread."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..vision.positions import cache_key
from .cache import ROOT
from .text import ReplyText
from .types import Delta, Finish, FinishReason, Priority, Request, Stats, Usage


class ReplayDiverged(RuntimeError):
    """A replayed reply drew a different token than it sent before preemption."""


@dataclass(slots=True)
class Sequence:
    request: Request
    emit: Callable[[Delta], None]
    text: ReplyText
    eos_ids: frozenset[int]
    generated: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)   # KV block table while admitted
    computed: int = 0                    # positions whose KV is in the pool
    state: int = -1                      # a hybrid's state slot while admitted (engine/states.py)
    cached_tokens: int = 0               # prompt positions found in the prefix cache
    parent_cid: int = ROOT               # content id of the last registered block
    registered: int = 0                  # leading blocks registered in the prefix cache
    replay: list[int] = field(default_factory=list)   # tokens sent before a preemption
    aborted: bool = False                # set from the client's thread
    done: bool = False
    counted_prompt: bool = False         # prompt counters taken (not again on replay)
    t_submit: float = field(default_factory=time.perf_counter)
    t_start: float = 0.0                 # first admitted to a lane
    t_first: float = 0.0                 # first reply token sampled
    prefill_seconds: float = 0.0
    draft_k: int = 4                     # draft length, adapted to recent acceptance
    drafted: int = 0
    accepted_drafts: int = 0
    key_prompt: list[int] = field(init=False)     # the prompt as the prefix cache keys it (once)

    def __post_init__(self) -> None:
        self.key_prompt = cache_key(self.request.prompt, self.request.images)

    @property
    def background(self) -> bool:
        return self.request.priority == Priority.BACKGROUND

    @property
    def prefilled(self) -> bool:
        return self.computed >= len(self.request.prompt)

    @property
    def tokens(self) -> list[int]:
        return self.request.prompt + self.generated

    @property
    def key_tokens(self) -> list[int]:
        """The tokens as the prefix cache keys them (an image's positions by its digest)."""
        return self.key_prompt + self.generated

    @property
    def replaying(self) -> bool:
        return len(self.generated) < len(self.replay)

    @property
    def remaining(self) -> int:
        return self.request.max_tokens - len(self.generated)

    def adapt_draft(self, proposed: int, accepted: int, k_max: int) -> None:
        """Lengthen drafts while they are all kept; shorten to what was kept when not."""
        if proposed == 0:
            return
        self.draft_k = min(k_max, self.draft_k * 2) if accepted == proposed else max(1, accepted + 1)

    def accept(self, token: int) -> Delta | None:
        """Append one sampled token; the delta to send, or None while replaying."""
        i = len(self.generated)
        self.generated.append(token)
        if i < len(self.replay):
            if token != self.replay[i]:
                raise ReplayDiverged(f"replayed position {i} drew token {token}, not {self.replay[i]}")
            return None
        req = self.request
        if token in self.eos_ids and not req.ignore_eos:
            return self.finish(FinishReason.STOP, self.text.finish(), new_tokens=[token])
        step = self.text.push(token)
        if step.stopped:
            return self.finish(FinishReason.STOP, step.text, step.stop_string, new_tokens=[token])
        if len(self.generated) >= req.max_tokens:
            return self.finish(FinishReason.LENGTH, step.text + self.text.finish(), new_tokens=[token])
        return Delta(text=step.text, token_ids=[token])

    def preempt(self) -> None:
        """Give up the lane: replay from the prompt later, checking what was sent."""
        self.replay = self.replay if len(self.replay) > len(self.generated) else list(self.generated)
        self.generated = []
        self.blocks, self.computed, self.parent_cid, self.registered = [], 0, ROOT, 0

    def finish(self, reason: FinishReason, text: str = "", stop_string: str | None = None,
               error: str | None = None, new_tokens: list[int] | None = None, refused: bool = False) -> Delta:
        self.done = True
        tokens = self.generated
        now = time.perf_counter()
        decode_seconds = (now - self.t_first) if self.t_first else 0.0
        stats = Stats(
            token_sha=token_sha(tokens),
            time_to_first_token=(self.t_first - self.t_submit) if self.t_first else 0.0,
            prefill_seconds=self.prefill_seconds,
            decode_seconds=decode_seconds,
            decode_tokens_per_second=((len(tokens) - 1) / decode_seconds) if decode_seconds > 0 else None,
            queued_seconds=(self.t_start - self.t_submit) if self.t_start else 0.0,
            drafted=self.drafted,
            accepted=self.accepted_drafts,
        )
        think = self.request.think
        usage = Usage(prompt_tokens=len(self.request.prompt), completion_tokens=len(tokens),
                      cached_tokens=self.cached_tokens,
                      reasoning_tokens=think.reasoning_tokens(tokens) if think else 0)
        fin = Finish(reason=reason, usage=usage, stats=stats, stop_string=stop_string, error=error,
                     refused=refused)
        return Delta(text=text, token_ids=new_tokens or [], finish=fin)


def token_sha(tokens: list[int]) -> str:
    """SHA-256 over the reply's token ids, each as 4 little-endian bytes."""
    return hashlib.sha256(b"".join(t.to_bytes(4, "little") for t in tokens)).hexdigest()
