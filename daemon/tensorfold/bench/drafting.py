"""`tensorfold bench drafting`: decode tokens/s with drafts vs "draft": false.

Two workloads, each run both ways in one process on one engine, with a cold
prefix cache for every reply, checking that each drafted reply equals its
serial one (token_sha):

- editing: the prompt holds a ~150-line source file and asks for it back with
  one change, so the reply repeats most of the prompt;
- chat: open questions, sampled.
"""

from __future__ import annotations

import argparse
import inspect
import queue
import time
from dataclasses import dataclass

CHAT_QUESTIONS = [
    "Tell me about the history of lighthouses.",
    "What should I pack for a week of hiking in the mountains?",
    "Explain how vaccines train the immune system.",
    "Write a short story about a robot who learns to paint.",
]


@dataclass(slots=True)
class Result:
    tokens: int = 0
    seconds: float = 0.0
    drafted: int = 0
    accepted: int = 0

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def editing_prompt() -> str:
    from ..engine import scheduler

    source = inspect.getsource(scheduler)
    lines = source.splitlines()[:150]
    return ("Here is a Python file:\n```python\n" + "\n".join(lines) + "\n```\n"
            "Return the whole file with one change: rename the method `requeue` to `wait_again`. "
            "Reply with the code only.")


def run_one(client, prompt: list[int], draft: bool, max_tokens: int, sampling, constraints: tuple = (),
            ignore_eos: bool = False) -> tuple[str, Result]:
    """One reply from a cold prefix cache: its token_sha and decode figures."""
    from ..engine.types import Request

    done: queue.SimpleQueue = queue.SimpleQueue()
    client.core.call(client.core.cache.clear_idle)
    req = Request(id=f"bench-{time.monotonic_ns()}", prompt=prompt, max_tokens=max_tokens,
                  sampling=sampling, draft=draft, constraints=constraints, ignore_eos=ignore_eos)
    client.core.submit(req, lambda d: d.finish and done.put(d.finish))
    fin = done.get()
    n = fin.usage.completion_tokens
    return fin.stats.token_sha, Result(max(n - 1, 0), fin.stats.decode_seconds, fin.stats.drafted,
                                       fin.stats.accepted)


def workload(client, name: str, prompts: list[str], max_tokens: int, sampling) -> tuple[Result, Result, int]:
    tok = client.tokenizer
    drafted, serial, same = Result(), Result(), 0
    for text in prompts:
        ids = tok.encode(tok.render_chat([{"role": "user", "content": text}]))
        sha_d, d = run_one(client, ids, True, max_tokens, sampling)
        sha_s, s = run_one(client, ids, False, max_tokens, sampling)
        same += sha_d == sha_s
        for total, part in ((drafted, d), (serial, s)):
            total.tokens += part.tokens
            total.seconds += part.seconds
            total.drafted += part.drafted
            total.accepted += part.accepted
    return drafted, serial, same


def run_drafting_bench(args: argparse.Namespace) -> int:
    from ..checkpoints.resolve import resolve_model
    from ..config import EngineConfig
    from ..engine.async_engine import AsyncEngine
    from ..engine.types import SamplingParams

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    folder = resolve_model(args.model)
    client = AsyncEngine(folder, EngineConfig(dtype=args.dtype, device=args.device, parallel=1,
                                               draft_model=args.draft_model, kv_memory=args.kv_memory))
    client.start()
    try:
        print(f"model {folder.name}  drafter {client.drafter.name}"
              f"{' (' + args.draft_model + ')' if args.draft_model else ''}  dtype {client.runner.dtype}  "
              f"threads {torch.get_num_threads()}", flush=True)
        loads = [("editing", [editing_prompt()], args.edit_tokens, SamplingParams(temperature=0.0)),
                 ("chat", CHAT_QUESTIONS[:args.chat_prompts], args.chat_tokens,
                  SamplingParams(temperature=0.7, seed=1))]
        print(f"{'workload':10}{'draft tok/s':>13}{'serial tok/s':>14}{'speed-up':>10}{'accepted':>14}"
              f"{'identical':>11}")
        ok = True
        for name, prompts, max_tokens, sampling in loads:
            d, s, same = workload(client, name, prompts, max_tokens, sampling)
            rate = f"{d.accepted}/{d.drafted}"
            print(f"{name:10}{d.rate:13.1f}{s.rate:14.1f}{d.rate / s.rate:9.2f}x{rate:>14}"
                  f"{f'{same}/{len(prompts)}':>11}", flush=True)
            ok &= same == len(prompts)
    finally:
        client.stop()
    return 0 if ok else 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None)
    p.add_argument("--draft-model", default=None, help="draft with this model (default: prompt lookup)")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--kv-memory", type=float, default=2.0)
    p.add_argument("--edit-tokens", type=int, default=256)
    p.add_argument("--chat-tokens", type=int, default=128)
    p.add_argument("--chat-prompts", type=int, default=4)
