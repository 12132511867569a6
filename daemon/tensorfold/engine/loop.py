"""The engine thread: admit -> schedule -> forward -> sample -> emit, one round at a time."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol

import torch

from .sampler import sample
from .scheduler import Scheduler
from .sequence import Sequence
from .text import ReplyText
from .types import Delta, FinishReason, Request

log = logging.getLogger(__name__)


class Backend(Protocol):
    vocab_size: int

    def new_kv(self, capacity: int) -> Any: ...
    def forward(self, tokens: list[int], segments: list[Any], out_rows: list[int]) -> torch.Tensor: ...


@dataclass(slots=True)
class Counters:
    """Totals for /health: written by the engine thread only, read by any."""

    requests_running: int = 0
    requests_waiting: int = 0
    requests_total: int = 0
    prompt_tokens_total: int = 0
    completion_tokens_total: int = 0
    prefill_seconds_total: float = 0.0
    decode_seconds_total: float = 0.0
    rounds_total: int = 0

    def snapshot(self) -> dict[str, int | float | bool]:
        out: dict[str, int | float | bool] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["busy"] = self.requests_running > 0
        return out


class Engine:
    def __init__(self, backend: Backend, tokenizer: Any, segment_type: Callable[..., Any]) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.segment = segment_type
        self.scheduler = Scheduler(lanes=1)
        self.counters = Counters()
        self._inbox: queue.SimpleQueue[Sequence | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="tensorfold-engine", daemon=True)
        self._stopping = False

    # -- called from other threads -------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._inbox.put(None)
        self._thread.join(timeout=30)

    def submit(self, request: Request, emit: Callable[[Delta], None]) -> Sequence:
        text = ReplyText(self.tokenizer.hf, request.stop, skip_special_tokens=not request.ignore_eos)
        seq = Sequence(request=request, emit=emit, text=text, eos_ids=self.tokenizer.eos_token_ids)
        self._inbox.put(seq)
        return seq

    def abort(self, seq: Sequence) -> None:
        seq.aborted = True
        self._inbox.put(None)        # wake the loop if it is idle

    # -- the engine thread ---------------------------------------------------------
    def _run(self) -> None:
        torch.set_grad_enabled(False)
        while not self._stopping:
            self._take_inbox(block=self.scheduler.idle)
            for seq in self.scheduler.drop_aborted():
                self._release(seq)
            for seq in self.scheduler.admit():
                seq.t_start = time.perf_counter()
                self.counters.requests_waiting -= 1
                self.counters.requests_running += 1
            for seq in list(self.scheduler.running):
                self._step(seq)

    def _take_inbox(self, block: bool) -> None:
        try:
            item = self._inbox.get(block=block)
            while True:
                if item is not None:
                    self.scheduler.add(item)
                    self.counters.requests_total += 1
                    self.counters.requests_waiting += 1
                item = self._inbox.get_nowait()
        except queue.Empty:
            pass

    def _step(self, seq: Sequence) -> None:
        """One round for one sequence: its prefill, or one decoded token."""
        try:
            t0 = time.perf_counter()
            if not seq.prefilled:
                prompt = seq.request.prompt
                seq.kv = self.backend.new_kv(len(prompt) + seq.request.max_tokens)
                logits = self.backend.forward(prompt, [self.segment(seq.kv, 0, len(prompt))], [len(prompt) - 1])
            else:
                logits = self.backend.forward([seq.generated[-1]], [self.segment(seq.kv, seq.position, 1)], [0])
            token = sample(logits[0], seq.request.sampling, len(seq.generated))
            now = time.perf_counter()
            c = self.counters
            if not seq.prefilled:
                seq.prefilled, seq.t_first, seq.prefill_seconds = True, now, now - t0
                c.prefill_seconds_total += now - t0
                c.prompt_tokens_total += len(seq.request.prompt)
            else:
                seq.decode_seconds += now - t0
                c.decode_seconds_total += now - t0
            c.rounds_total += 1
            c.completion_tokens_total += 1
            delta = seq.accept(token)
        except Exception as exc:  # a failed round ends this reply only
            log.exception("request %s failed", seq.request.id)
            delta = seq.finish(FinishReason.ERROR, error=f"generation failed: {exc}")
        if seq.done:          # counters settle before the client hears the end
            self._release(seq)
        seq.emit(delta)

    def _release(self, seq: Sequence) -> None:
        """Free a finished or abandoned sequence (the engine thread owns the counters)."""
        if seq in self.scheduler.running:
            self.scheduler.retire(seq)
        if seq.t_start:
            self.counters.requests_running -= 1
        else:
            self.counters.requests_waiting -= 1
        seq.kv = None
        seq.done = True
