"""`tensorfold exactness`: every reply equals its solo run, token for token.

Runs a suite of chat requests (prompts of mixed lengths, greedy and sampled
with top-p/top-k/min-p, several seeds, replies up to 256 tokens) against a
running daemon (--url) or against servers it starts in-process, and compares
each reply's token_sha (SHA-256 of its token ids) across:

- concurrent (8 at a time, staggered arrivals) vs solo;
- reused prefix (a rerun, prompt in the prefix cache) vs fresh;
- a different prefill chunk size vs the default (in-process only);
- one CPU thread vs two (in-process only: the kernels split outputs, never a sum);
- two ranks vs one (in-process, on the CPU: the model split across two gloo
  processes; every case, 8 at a time, drafted by prompt lookup);
- a background request preempted by foreground ones and replayed vs solo;
- streamed vs whole;
- penalties and logit_bias in some cases (frequency, presence, repetition);
- constrained cases throughout (every second case): each grammar form,
  forced tool calls, thinking budgets, and a grammar or a forced call after a
  think block (in-process servers serve a ChatML template that opens a think
  block when a request turns thinking on; --chat-template on a daemon);
- drafted vs "draft": false, alone and 8 concurrent, for each drafter (prompt
  lookup, and a draft model: in-process, the target drafting for itself
  unless --draft-model names another).

Prints identical/total per comparison; exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:          # imported where used: `tensorfold serve` builds this parser too
    import httpx

from .config import KV_CACHES

TOPICS = [
    "What is the capital of France?", "Write a haiku about autumn.", "Explain how a lighthouse works.",
    "List five uses of copper.", "Tell me a story about a fox who learns to sail.",
    "Summarise the rules of chess in a paragraph.", "Why do cats purr?", "Describe the water cycle.",
    "Give me a recipe for pancakes.", "What are prime numbers? Give examples.",
]
FILLER = ("The archive held letters from every harbour on the coast, each one filed by the date of the "
          "tide it arrived on, and the keeper read them aloud on winter evenings. ")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
              "type": "object", "properties": {"city": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
THINK = {"chat_template_kwargs": {"enable_thinking": True}}
# every second case carries one of these: each grammar form, forced tool calls, thinking budgets
# (alone, then with a grammar and a forced call that start after the think end)
CONSTRAINTS: list[dict[str, Any]] = [
    {"guided_json": {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 40},
                                                      "score": {"type": "integer"}},
                     "required": ["answer", "score"]}},
    {"guided_regex": "[A-Z][a-z]{2,8}( [a-z]{2,8}){1,6}\\."},
    {"guided_choice": ["yes", "no", "maybe"]},
    {"guided_grammar": 'root ::= "The answer is " [0-9]+ "."'},
    {"response_format": {"type": "json_object"}},
    {"tools": TOOLS, "tool_choice": "required"},
    {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
    {**THINK, "thinking_budget": 6},
    {**THINK, "thinking_budget": 5, "guided_choice": ["yes", "no", "maybe"]},
    {**THINK, "thinking_budget": 5, "tools": TOOLS, "tool_choice": "required"},
]
# In-process servers serve the model with this ChatML template: the model's own prompts, plus a
# think block opened by the prompt when a request turns thinking on (SmolLM2's template has none).
THINKING_TEMPLATE = (          # image parts (--images) as Qwen's vision tokens
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}{{ m.content }}{% else %}"
    "{% for p in m.content %}{% if p.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking %}<think>\n{% endif %}{% endif %}")
SAMPLINGS: list[dict[str, Any]] = [
    {"temperature": 0},
    {"temperature": 0.7},
    {"temperature": 1.0, "top_p": 0.9},
    {"temperature": 0.8, "top_k": 40},
    {"temperature": 1.1, "min_p": 0.05},
    {"temperature": 0.9, "top_p": 0.95, "top_k": 50, "min_p": 0.02},
    {"temperature": 0.8, "frequency_penalty": 0.6, "presence_penalty": 0.4},
    {"temperature": 0, "repetition_penalty": 1.3, "logit_bias": {"13": 2.5, "29": -4}},
]


@dataclass(slots=True)
class Case:
    index: int
    body: dict[str, Any]


@dataclass(slots=True)
class Tally:
    identical: int = 0
    total: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, case: Case, expected: str, got: str | None, note: str = "") -> None:
        self.total += 1
        if got == expected:
            self.identical += 1
        else:
            self.failures.append(f"case {case.index}: {note or 'token_sha differs'}")


def image_part(index: int) -> dict[str, Any]:
    """A case's picture: a PNG data URL of random pixels, its size from the case."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(index)
    size = (32 + 16 * (index % 5), 32 + 16 * (index % 3))
    buf = io.BytesIO()
    Image.fromarray((rng.random((size[1], size[0], 3)) * 255).astype(np.uint8)).save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def make_cases(n: int, max_tokens: int, seed: int, images: bool = False) -> list[Case]:
    """`images`: every third case's user message carries a picture too."""
    rng = random.Random(seed)
    run_id = uuid.uuid4().hex[:8]
    out = []
    for i in range(n):
        length = rng.choice([0, 0, 1, 3, 8, 20])        # filler paragraphs: short to ~900 tokens
        user = (FILLER * length) + TOPICS[i % len(TOPICS)]
        body = {
            "messages": [{"role": "system", "content": f"Session {run_id}-{i}. You are a helpful assistant."},
                         {"role": "user", "content": user}],
            "max_tokens": rng.choice([max(1, max_tokens >> s) for s in (4, 3, 2, 1, 0)]),
            "seed": rng.randrange(1 << 31),
            "ignore_eos": rng.random() < 0.5,
            **SAMPLINGS[i % len(SAMPLINGS)],
            **(CONSTRAINTS[(i // 2) % len(CONSTRAINTS)] if i % 2 == 1 else {}),
        }
        if images and i % 3 == 0:
            body["messages"][1]["content"] = [{"type": "text", "text": user}, image_part(i)]
        out.append(Case(i, body))
    return out


async def ask(http: httpx.AsyncClient, body: dict[str, Any], stream: bool = False) -> dict[str, Any]:
    """One chat completion; returns its tensorfold block and usage."""
    if not stream:
        r = await http.post("/v1/chat/completions", json=body)
        r.raise_for_status()
        data = r.json()
        return {"sha": data["tensorfold"]["token_sha"], "usage": data["usage"]}
    last: dict[str, Any] = {}
    async with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(event["error"].get("message"))
            if event.get("tensorfold"):
                last = event
    return {"sha": last["tensorfold"]["token_sha"], "usage": last["usage"]}


async def health(http: httpx.AsyncClient) -> dict[str, Any]:
    return (await http.get("/health")).json()


async def solo(http: httpx.AsyncClient, cases: list[Case], stream: bool = False) -> list[dict[str, Any]]:
    return [await ask(http, c.body, stream) for c in cases]


async def concurrent(http: httpx.AsyncClient, cases: list[Case], width: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    results: list[dict[str, Any]] = [{} for _ in cases]

    async def one(i: int, delay: float) -> None:
        await asyncio.sleep(delay)
        results[i] = await ask(http, cases[i].body, stream=bool(i % 2))

    for start in range(0, len(cases), width):
        batch = range(start, min(start + width, len(cases)))
        await asyncio.gather(*(one(i, rng.uniform(0, 0.4)) for i in batch))
    return results


PREEMPT_TOKENS = 256


async def preempted(http: httpx.AsyncClient, case: Case) -> tuple[dict[str, Any], bool]:
    """Run `case` as background; once it has decoded a few tokens (the server's
    completion counter moves: a reply that holds its text back, such as a tool
    call, streams nothing yet), fill every lane with foreground work."""
    first = await health(http)
    lanes = int(first.get("streams_maximum", 1))
    before = int(first.get("preemptions_total", 0))
    decoded = int(first.get("completion_tokens_total", 0))
    body = {**case.body, "priority": "background"}
    task = asyncio.ensure_future(ask(http, body, stream=True))
    while not task.done() and int((await health(http)).get("completion_tokens_total", 0)) < decoded + 3:
        await asyncio.sleep(0.002)
    fg = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0}
    await asyncio.gather(*(ask(http, fg) for _ in range(lanes)))
    result = await task
    return result, int((await health(http)).get("preemptions_total", 0)) > before


RANKS = "2 ranks (8 concurrent, drafted) vs 1 rank"
COMPARISONS = ("concurrent (8, staggered) vs solo", "reused prefix vs fresh", "other prefill chunk vs default",
               "1 thread vs 2 threads", RANKS,
               "background preempted vs solo", "streamed vs whole",
               "ngram drafted vs draft:false", "ngram drafted x8 concurrent vs draft:false",
               "model drafted vs draft:false", "model drafted x8 concurrent vs draft:false")


async def drafted_vs_serial(http: httpx.AsyncClient, cases: list[Case], seed: int, name: str,
                            tallies: dict[str, Tally], alone: list[dict[str, Any]] | None = None,
                            together: list[dict[str, Any]] | None = None) -> None:
    serial = await solo(http, [Case(c.index, {**c.body, "draft": False}) for c in cases])
    alone = alone or await solo(http, cases)
    together = together or await concurrent(http, cases, 8, seed + 1)
    for c, s, a, t in zip(cases, serial, alone, together):
        tallies[f"{name} drafted vs draft:false"].add(c, s["sha"], a["sha"])
        tallies[f"{name} drafted x8 concurrent vs draft:false"].add(c, s["sha"], t["sha"])


async def run_suite(urls: dict[str, str | None], cases: list[Case], preempt_cases: int,
                    seed: int) -> dict[str, Tally]:
    """urls: main (drafting by prompt lookup), chunk (another prefill chunk), preempt (few lanes),
    model (drafting with a draft model); None skips what needs it."""
    import httpx

    tallies = {k: Tally() for k in COMPARISONS}
    timeout = httpx.Timeout(600.0)
    async with httpx.AsyncClient(base_url=urls["main"], timeout=timeout) as http:
        fresh = await solo(http, cases)
        reused = await solo(http, cases)
        streamed = await solo(http, cases, stream=True)
        together = await concurrent(http, cases, 8, seed)
        drafter = (await health(http)).get("drafter", "ngram")
        await drafted_vs_serial(http, cases, seed, drafter, tallies, fresh, together)
    for c, f, r, s, t in zip(cases, fresh, reused, streamed, together):
        cached = r["usage"]["prompt_tokens_details"]["cached_tokens"]
        tallies["reused prefix vs fresh"].add(c, f["sha"], r["sha"] if cached > 0 else None,
                                              "" if cached > 0 else "rerun found no cached prefix")
        tallies["streamed vs whole"].add(c, f["sha"], s["sha"])
        tallies["concurrent (8, staggered) vs solo"].add(c, f["sha"], t["sha"])
    for server, comparison in (("chunk", "other prefill chunk vs default"), ("threads1", "1 thread vs 2 threads")):
        if urls.get(server):       # the same cases, one at a time, on a server set up otherwise
            async with httpx.AsyncClient(base_url=urls[server], timeout=timeout) as http:
                for c, f in zip(cases, fresh):
                    tallies[comparison].add(c, f["sha"], (await ask(http, c.body))["sha"])
    if urls.get("ranks2"):
        async with httpx.AsyncClient(base_url=urls["ranks2"], timeout=timeout) as http:
            split = await concurrent(http, cases, 8, seed + 2)
        for c, f, t in zip(cases, fresh, split):
            tallies[RANKS].add(c, f["sha"], t["sha"])
    if urls.get("model"):
        async with httpx.AsyncClient(base_url=urls["model"], timeout=timeout) as http:
            await drafted_vs_serial(http, cases, seed, "model", tallies)
    async with httpx.AsyncClient(base_url=urls["preempt"], timeout=timeout) as http:
        longest = max(c.body["max_tokens"] for c in cases)
        long_cases = [c for c in cases if c.body["max_tokens"] >= longest // 2 and c.body["ignore_eos"]]
        long_cases = long_cases[:preempt_cases]
        for c in long_cases:
            # long enough that the foreground work arrives while it decodes, however fast the engine
            c = Case(c.index, {**c.body, "max_tokens": max(c.body["max_tokens"], PREEMPT_TOKENS)})
            alone = await ask(http, c.body)
            result, was = await preempted(http, c)
            tallies["background preempted vs solo"].add(
                c, alone["sha"], result["sha"] if was else None, "" if was else "was not preempted")
    return tallies


@contextmanager
def in_process_servers(args: argparse.Namespace) -> Iterator[dict[str, str]]:
    """The default server, one with another prefill chunk, a one-lane one (for preemption)
    and one drafting with a draft model."""
    from .api.app import create_app
    from .api.server import ServerThread
    from .checkpoints.resolve import resolve_model
    from .config import EngineConfig, ServerConfig
    from .backends.torch.runner import pick_device
    from .engine.async_engine import AsyncEngine, pick_engine
    from .parsers import parser_for_template

    folder = resolve_model(args.model)
    common = {"engine": args.engine, "dtype": args.dtype, "device": args.device, "kv_memory": args.kv_memory,
              "kv_cache": args.kv_cache,
              "chat_template": THINKING_TEMPLATE, "vision": args.images}
    configs = {"main": EngineConfig(parallel=8, threads=max(2, args.threads or 2), **common),
               "threads1": EngineConfig(parallel=8, threads=1, **common),
               "chunk": EngineConfig(parallel=2, prefill_chunk=23, **common),
               "preempt": EngineConfig(parallel=1, **common),
               "model": EngineConfig(parallel=8, draft_model=args.draft_model or str(folder), **common)}
    if pick_engine(configs["main"]) == "torch" and pick_device(args.device).type == "cpu":
        configs["ranks2"] = EngineConfig(parallel=8, threads=1, ranks=2, **common)
    with ExitStack() as stack:
        urls = {}
        for name, cfg in configs.items():
            engine = AsyncEngine(folder, cfg)
            engine.start()
            stack.callback(engine.stop)
            # a template without a tool-call format reads forced calls as Hermes JSON
            tool_parser = None if parser_for_template(engine.tokenizer.chat_template) else "hermes"
            thread = ServerThread(create_app(engine, ServerConfig(engine=cfg, tool_parser=tool_parser)))
            urls[name] = thread.start()
            stack.callback(thread.stop)
        yield urls


def report(tallies: dict[str, Tally], optional: set[str]) -> bool:
    """Print the table; True when every comparison ran (optional ones may not) and all were identical."""
    print(f"{'comparison':44}{'identical / total':>20}")
    ok = True
    for name, t in tallies.items():
        shown = f"{t.identical} / {t.total}" if t.total else (
            "n/a" if name in optional else "NOT RUN")
        print(f"{name:44}{shown:>20}")
        ok &= t.identical == t.total and (t.total > 0 or name in optional)
        for f in t.failures[:10]:
            print(f"    {f}")
    print("all identical" if ok else "DIFFERENCES FOUND")
    return ok


def run_exactness(args: argparse.Namespace) -> int:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    cases = make_cases(args.cases, args.max_tokens, args.seed, args.images)
    thinking = sum("thinking_budget" in c.body for c in cases)
    constrained = sum(any(k in c.body for k in ("guided_json", "guided_regex", "guided_choice", "guided_grammar",
                                                 "response_format", "tool_choice")) for c in cases)
    pictures = sum(isinstance(c.body["messages"][1]["content"], list) for c in cases)
    print(f"{len(cases)} cases: {constrained} with a grammar or a forced tool call, {thinking} with a thinking budget"
          + (f", {pictures} with an image" if pictures else ""))
    if args.url:
        urls = {"main": args.url, "chunk": None, "threads1": None, "preempt": args.url, "model": None}
        tallies = asyncio.run(run_suite(urls, cases, args.preempt_cases, args.seed))
        # a daemon has one drafter, one prefill chunk and one rank count: the rows of the others stay empty
        optional = {name for name in COMPARISONS
                    if "drafted" in name or "chunk" in name or "thread" in name or "rank" in name}
    else:
        with in_process_servers(args) as urls:
            tallies = asyncio.run(run_suite(urls, cases, args.preempt_cases, args.seed))
        optional = set() if "ranks2" in urls else {RANKS}          # ranks: on the CPU engine
    return 0 if report(tallies, optional) else 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=None, help="a running daemon (default: start servers in-process)")
    p.add_argument("--model", default=None, help="in-process: the model (default: the built-in one)")
    p.add_argument("--engine", default="auto", choices=["auto", "torch", "mlx"], help="in-process: the engine")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--device", default="auto")
    p.add_argument("--draft-model", default=None,
                   help="in-process: the draft model of the model-drafting server (default: the model itself)")
    p.add_argument("--kv-memory", type=float, default=1.0, help="in-process: GiB of KV cache per server")
    p.add_argument("--kv-cache", default="fp16", choices=list(KV_CACHES), help="in-process: the CPU engine's KV cache")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--cases", type=int, default=100)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--preempt-cases", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--images", action="store_true",
                   help="every third case sends a picture (a checkpoint with a vision tower; in-process: --vision)")


if __name__ == "__main__":
    sys.exit(run_exactness(argparse.ArgumentParser().parse_args()))
