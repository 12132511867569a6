"""A TEST DOUBLE of AsyncEngine, used only by the HTTP-contract tests of
tensorfold.api.

It has the AsyncEngine interface (tokenizer, context_length, model_name,
generate, health, and optionally kv_plan) and yields deterministic deltas, so these tests can check
the HTTP edge (framing, validation, envelopes, passthrough of fields) without
a model. It also records what reached it (`requests`, `aborted`,
`tokenizer.renders`) and fails on request when the prompt carries a marker:

    [[fail-finish]]  one delta, then Finish(reason=ERROR)
    [[fail-raise]]   one delta, then an exception from the iterator
    [[slow]]         a delta every 20 ms until max_tokens, the client leaves or end_all

Tokens are UTF-8 bytes (id = byte + 3); 1 is BOS, 2 is EOS. The chat template
is a small ChatML one that ignores tools (like SmolLM2's) and, like Qwen's,
refuses a system message after the first position.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

from tensorfold.checkpoints.errors import TemplateError
from tensorfold.engine.types import Delta, Finish, FinishReason, Request, Stats, Usage

OFFSET = 3
TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' and not loop.first -%}"
    "{{ raise_exception('System message must be at the beginning.') }}"
    "{%- endif -%}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)


def _raise(message: str) -> None:
    raise TemplateError(f"chat template error: {message}")


class FakeTokenizer:
    bos_token_id = 1
    eos_token_ids = frozenset({2})
    vocab_size = 256 + OFFSET
    has_chat_template = True

    def __init__(self) -> None:
        env = ImmutableSandboxedEnvironment()
        env.globals["raise_exception"] = _raise
        self.template = env.from_string(TEMPLATE)
        self.renders: list[dict[str, Any]] = []

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = [b + OFFSET for b in text.encode()]
        return [self.bos_token_id, *ids] if add_special_tokens else ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return bytes(i - OFFSET for i in ids if i >= OFFSET).decode(errors="replace")

    def render_chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    add_generation_prompt: bool = True, **template_kwargs: Any) -> str:
        self.renders.append({"messages": messages, "tools": tools, "kwargs": template_kwargs})
        return self.template.render(messages=messages, tools=tools,
                                    add_generation_prompt=add_generation_prompt, **template_kwargs)


@dataclass(frozen=True)
class FakeKVPlan:
    """What the API reads of the engine's KV plan (engine/capacity.py KVPlan)."""

    num_blocks: int
    block_size: int
    context_length: int
    limited_by_memory: bool


class FakeEngine:
    model_name = "fake-model"

    def __init__(self, context_length: int = 512,
                 reply: str = "Hello from the fake engine. This reply is deterministic.",
                 chunk: int = 5, kv_plan: FakeKVPlan | None = None) -> None:
        self.context_length = context_length
        self.kv_plan = kv_plan
        self.tokenizer = FakeTokenizer()
        self.reply = reply
        self.chunk = chunk
        self.requests: list[Request] = []
        self.aborted: list[str] = []
        self.finished: list[str] = []
        self.running = 0
        self.prompt_tokens = 0          # of ended requests, as the engine counts them
        self.completion_tokens = 0      # every delta's tokens, as they stream
        self.extra_health: dict[str, Any] = {}    # keys a test adds to health()
        self.ended: str | None = None   # end_all's message: every reply fails with it

    def health(self) -> dict[str, Any]:
        """The keys of engine/counters.py Counters.snapshot(), plus `extra_health`."""
        return {"requests_running": self.running, "requests_waiting": 0,
                "requests_total": len(self.requests), "prompt_tokens_total": self.prompt_tokens,
                "cached_tokens_total": 0, "completion_tokens_total": self.completion_tokens,
                "prefill_seconds_total": 0.001 * len(self.finished),
                "decode_seconds_total": 0.002 * len(self.finished),
                "rounds_total": self.completion_tokens, "preemptions_total": 0,
                "streams_decoding": self.running, "streams_prefilling": 0, "streams_maximum": 4,
                "kv_blocks_used": self.running, "busy": self.running > 0, **self.extra_health}

    def end_all(self, message: str) -> None:
        """As AsyncEngine.end_all: every reply in flight, and every later one, fails."""
        self.ended = message

    def request(self, request_id: str) -> Request:
        return next(r for r in self.requests if r.id == request_id)

    def _reply_text(self, request: Request) -> tuple[str, FinishReason, str | None]:
        """The reply and why it ends: EOS after `reply` (unless ignore_eos),
        the reply limit, or the earliest stop string (its text left out)."""
        text = self.reply * (1 + request.max_tokens // len(self.reply)) if request.ignore_eos else self.reply
        reason = FinishReason.STOP
        if len(text) > request.max_tokens:
            text, reason = text[:request.max_tokens], FinishReason.LENGTH
        hits = [(text.find(s), s) for s in request.stop if s in text]
        if hits:
            at, stop = min(hits)
            return text[:at], FinishReason.STOP, stop
        return text, reason, None

    def _finish(self, request: Request, tokens: list[int], reason: FinishReason,
                stop: str | None = None, error: str | None = None) -> Finish:
        sha = hashlib.sha256(b"".join(t.to_bytes(4, "little") for t in tokens)).hexdigest()
        return Finish(reason=reason, usage=Usage(prompt_tokens=len(request.prompt), completion_tokens=len(tokens)),
                      stats=Stats(token_sha=sha, time_to_first_token=0.001, prefill_seconds=0.001,
                                  decode_seconds=0.002, decode_tokens_per_second=1000.0),
                      stop_string=stop, error=error)

    async def generate(self, request: Request) -> AsyncIterator[Delta]:
        """The deltas of `_deltas`, counted into health() as they pass."""
        try:
            async with contextlib.aclosing(self._deltas(request)) as deltas:
                async for delta in deltas:
                    self.completion_tokens += len(delta.token_ids)
                    yield delta
        finally:
            self.prompt_tokens += len(request.prompt)

    async def _deltas(self, request: Request) -> AsyncIterator[Delta]:
        self.requests.append(request)
        self.running += 1
        done = False
        try:
            prompt = self.tokenizer.decode(request.prompt)
            if "[[slow]]" in prompt:
                sent: list[int] = []
                while len(sent) < request.max_tokens:
                    await asyncio.sleep(0.02)
                    if self.ended is not None:
                        done = True
                        yield Delta(finish=self._finish(request, sent, FinishReason.ERROR, error=self.ended))
                        return
                    sent.append(OFFSET + ord("."))
                    yield Delta(text=".", token_ids=[sent[-1]])
                done = True
                yield Delta(finish=self._finish(request, sent, FinishReason.LENGTH))
                return
            text, reason, stop = self._reply_text(request)
            tokens = self.tokenizer.encode(text)
            if stop is not None:      # the engine counts the tokens through the match
                tokens += self.tokenizer.encode(stop)
            for i in range(0, len(text), self.chunk):
                part = text[i:i + self.chunk]
                yield Delta(text=part, token_ids=self.tokenizer.encode(part))
                await asyncio.sleep(0)
                if "[[fail-finish]]" in prompt:
                    done = True
                    yield Delta(finish=self._finish(request, tokens[:1], FinishReason.ERROR,
                                                    error="injected failure"))
                    return
                if "[[fail-raise]]" in prompt:
                    raise RuntimeError("injected engine crash")
            done = True
            yield Delta(finish=self._finish(request, tokens, reason, stop))
        finally:
            self.running -= 1
            (self.finished if done else self.aborted).append(request.id)
