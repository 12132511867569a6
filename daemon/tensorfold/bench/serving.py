"""`tensorfold bench serving`: the served engine under load, over real HTTP.

Starts in-process servers (Hypercorn on free loopback ports, one at a time)
and drives /v1/chat/completions with httpx, printing three tables:

1. Aggregate output tokens/s at 1, 4 and 8 concurrent streams on a server
   with --parallel 8. Every stream sends the same-shaped requests one after
   another: distinct prompts of about --prompt-tokens tokens (a unique nonce
   first), --max-tokens replies with end tokens ignored, temperature 0.
   Wall time runs from the first send to the last reply; tokens are the
   replies' usage.completion_tokens. Ratios are to one stream.
2. Time to first token with a shared prefix of about --prefix-tokens tokens
   cold (a nonce at the very start of the prompt, so the cache has never seen
   it) and warm (the same prefix again, another question at the end), on the
   same server. TTFT is the server's `tensorfold.time_to_first_token` and,
   client-side, the time from sending to the first streamed content. Medians
   of --repeats, the cached tokens the warm request reported, and cold/warm.
3. Priority, on a server with --parallel 2: the TTFT of a short foreground
   request (about --short-tokens prompt tokens, --short-max-tokens reply)
   arriving --arrival seconds into a long request's prefill (about
   --long-tokens prompt tokens, one reply token): (a) alone, (b) with the long
   one sent as "priority": "background", (c) with the long one foreground.
   Every prompt starts with a fresh nonce, so the prefix cache hides no
   prefill. Medians of --repeats; ratios (b)/(a) and (c)/(a).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:          # imported where used: `tensorfold serve` builds this parser too
    import httpx

PARAGRAPHS = (
    "The lighthouse keeper wrote in his log every evening: the colour of the sea, the ships that "
    "passed, the birds that rested on the rail. Over forty years the entries grew shorter, yet he "
    "never missed a day, and the log became a record of the coast itself. ",
    "In the valley below, the miller counted sacks of grain by lamplight and argued with the river "
    "about the height of the weir, which the spring floods rebuilt each year in their own fashion. ",
    "A cartographer from the capital arrived one autumn with brass instruments and a crate of paper, "
    "measured the cliffs twice, and left a map on which the village was drawn a mile too far north. ",
    "The children of the harbour learned their letters from the names painted on the hulls of boats, "
    "and so every one of them could spell Marguerite, Persistence and Northern Star before their own. ",
)
QUESTIONS = (
    "Summarise the passage above in two sentences.", "Which people are mentioned above?",
    "What is the mood of the passage above?", "Give the passage above a short title.",
    "List three objects named in the passage above.", "Where does the passage above take place?",
    "What changes over time in the passage above?", "Rewrite the first sentence above more simply.",
)
SHORT_QUESTION = " What is a lighthouse for?"

# Sizes: (default run, --quick run); an explicit option wins over both.
SIZES: dict[str, tuple[Any, Any]] = {
    "streams": ("1,4,8", "1,4,8"),
    "prompt_tokens": (64, 32),
    "max_tokens": (64, 8),
    "requests": (1, 1),
    "prefix_tokens": (2000, 256),
    "repeats": (3, 1),
    "long_tokens": (3000, 512),
    "short_tokens": (20, 20),
    "short_max_tokens": (8, 8),
    "arrival": (0.3, 0.3),
}
TTFT_MAX_TOKENS = 4          # replies of the TTFT requests (table 2): enough for one visible chunk


@dataclass(slots=True)
class Reply:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    server_ttft: float | None        # tensorfold.time_to_first_token
    client_ttft: float | None        # send -> first streamed content (streamed replies only)
    prefill_seconds: float | None    # tensorfold.prefill_seconds


class Prompts:
    """Texts of about n tokens under the served model's tokenizer, each led by a nonce."""

    def __init__(self, folder: Path) -> None:
        from ..checkpoints.tokenizer import Tokenizer

        self.tokenizer = Tokenizer(folder)
        self._filler = self.tokenizer.encode("".join(PARAGRAPHS))
        self.run = uuid.uuid4().hex[:4]
        self._count = 0

    def nonce(self) -> str:
        self._count += 1
        return f"[{self.run}{self._count}]"

    def text(self, n_tokens: int, tail: str = "") -> str:
        """A nonce, filler, then `tail`: about n_tokens tokens in all (before the chat template)."""
        head = self.nonce() + " "
        fixed = len(self.tokenizer.encode(head + tail))
        need = max(0, n_tokens - fixed)
        ids: list[int] = []
        while len(ids) < need:
            ids += self._filler
        return head + self.tokenizer.decode(ids[:need]) + tail


# ---------------------------------------------------------------- HTTP


def _reply(final: dict[str, Any], client_ttft: float | None) -> Reply:
    usage = final.get("usage") or {}
    stats = final.get("tensorfold") or {}
    return Reply(
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        completion_tokens=int(usage.get("completion_tokens", 0)),
        cached_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)),
        server_ttft=stats.get("time_to_first_token"),
        client_ttft=client_ttft,
        prefill_seconds=stats.get("prefill_seconds"),
    )


async def _raise_for(r: httpx.Response) -> None:
    if r.status_code >= 400:
        await r.aread()
        raise RuntimeError(f"HTTP {r.status_code} from {r.request.url}: {r.text[:500]}")


async def chat(http: httpx.AsyncClient, body: dict[str, Any], stream: bool = False) -> Reply:
    """One chat completion; streamed replies also get a client-side TTFT."""
    t0 = time.perf_counter()
    if not stream:
        r = await http.post("/v1/chat/completions", json=body)
        await _raise_for(r)
        return _reply(r.json(), None)
    first: float | None = None
    final: dict[str, Any] = {}
    async with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        await _raise_for(r)
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(f"stream error: {event['error'].get('message')}")
            if first is None and any((c.get("delta") or {}).get("content") for c in event.get("choices", [])):
                first = time.perf_counter() - t0
            if event.get("usage"):
                final = event
    if not final:
        raise RuntimeError("the stream ended without usage")
    return _reply(final, first)


def _body(messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"messages": messages, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0, **extra}


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def warm_up(http: httpx.AsyncClient, prompts: Prompts) -> None:
    """One request through a full prefill chunk and a few decode rounds (first-call costs)."""
    await chat(http, _body(_user(prompts.text(300)), 4), stream=True)


# ---------------------------------------------------------------- measurements


@dataclass(slots=True)
class Throughput:
    streams: int
    requests: int
    tokens: int
    seconds: float
    prompt_tokens: float

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


async def measure_throughput(http: httpx.AsyncClient, prompts: Prompts, streams: int, requests: int,
                             prompt_tokens: int, max_tokens: int) -> Throughput:
    bodies = [[_body(_user(prompts.text(prompt_tokens)), max_tokens) for _ in range(requests)]
              for _ in range(streams)]

    async def one_stream(mine: list[dict[str, Any]]) -> list[Reply]:
        return [await chat(http, b) for b in mine]

    t0 = time.perf_counter()
    replies = [r for rs in await asyncio.gather(*(one_stream(b) for b in bodies)) for r in rs]
    seconds = time.perf_counter() - t0
    return Throughput(streams, len(replies), sum(r.completion_tokens for r in replies), seconds,
                      statistics.median(r.prompt_tokens for r in replies))


async def measure_prefix(http: httpx.AsyncClient, prompts: Prompts, prefix_tokens: int,
                         repeats: int) -> tuple[list[Reply], list[Reply]]:
    cold, warm = [], []
    for k in range(repeats):
        document = prompts.text(prefix_tokens)            # the nonce leads the whole prompt
        q_cold, q_warm = QUESTIONS[(2 * k) % len(QUESTIONS)], QUESTIONS[(2 * k + 1) % len(QUESTIONS)]
        system = {"role": "system", "content": document}
        cold.append(await chat(http, _body([system, {"role": "user", "content": q_cold}], TTFT_MAX_TOKENS),
                               stream=True))
        warm.append(await chat(http, _body([system, {"role": "user", "content": q_warm}], TTFT_MAX_TOKENS),
                               stream=True))
    return cold, warm


CASES = ("alone", "background", "foreground")


async def measure_priority(http: httpx.AsyncClient, prompts: Prompts, sizes: argparse.Namespace
                           ) -> dict[str, list[tuple[Reply, Reply | None]]]:
    out: dict[str, list[tuple[Reply, Reply | None]]] = {c: [] for c in CASES}
    for _ in range(sizes.repeats):
        for case in CASES:
            short = _body(_user(prompts.text(sizes.short_tokens, tail=SHORT_QUESTION)), sizes.short_max_tokens)
            if case == "alone":
                out[case].append((await chat(http, short, stream=True), None))
                continue
            background = case == "background"
            extra = {"priority": "background"} if background else {}
            long = _body(_user(prompts.text(sizes.long_tokens, tail="Summarise the text above.")), 1, **extra)
            await wait_idle(http)
            long_task = asyncio.ensure_future(chat(http, long))
            long_reply: Reply | None = None
            try:
                await asyncio.sleep(sizes.arrival)
                reply = await chat(http, short, stream=True)
                if not background:              # its prefill is over by now: the short one waited for it
                    long_reply = await long_task
            finally:
                if not long_task.done():        # a background prompt still prefilling: no need to wait
                    long_task.cancel()
                    with suppress(asyncio.CancelledError):
                        await long_task
                    await wait_idle(http)
            out[case].append((reply, long_reply))
    return out


async def wait_idle(http: httpx.AsyncClient, timeout: float = 900.0) -> None:
    """Until the server runs and queues nothing (a cancelled request has been dropped)."""
    deadline = time.monotonic() + timeout
    while True:
        h = (await http.get("/health")).json()
        if not h.get("requests_running") and not h.get("requests_waiting"):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server is still busy after {timeout:.0f} s: {h}")
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------- report


def _med(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _s(x: float | None, width: int) -> str:
    return f"{x:{width}.3f}" if x is not None else f"{'n/a':>{width}}"


def _ratio(a: float | None, b: float | None, width: int) -> str:
    if a is None or b is None or b <= 0:
        return f"{'n/a':>{width}}"
    return f"{a / b:{width - 1}.2f}x"


def print_throughput(rows: list[Throughput], max_tokens: int) -> None:
    print(f"\n1. Aggregate output tokens/s (server --parallel {max(r.streams for r in rows)}; "
          f"{max_tokens} tokens per reply, ignore_eos, temperature 0)")
    print(f"{'streams':>8}{'requests':>10}{'prompt tok':>12}{'out tokens':>12}{'wall s':>10}"
          f"{'tokens/s':>11}{'vs 1':>9}")
    base = rows[0].tps
    for r in rows:
        print(f"{r.streams:8d}{r.requests:10d}{r.prompt_tokens:12.0f}{r.tokens:12d}{r.seconds:10.2f}"
              f"{r.tps:11.1f}{_ratio(r.tps, base, 9)}")


def print_prefix(cold: list[Reply], warm: list[Reply], prefix_tokens: int) -> None:
    print(f"\n2. Time to first token, ~{prefix_tokens}-token shared prefix: cold vs cached "
          f"(median of {len(cold)}; seconds)")
    print(f"{'':8}{'prompt tok':>12}{'cached tok':>12}{'TTFT server':>13}{'TTFT client':>13}")
    for name, rs in (("cold", cold), ("warm", warm)):
        print(f"{name:8}{_med([r.prompt_tokens for r in rs]):12.0f}{_med([r.cached_tokens for r in rs]):12.0f}"
              f"{_s(_med([r.server_ttft for r in rs]), 13)}{_s(_med([r.client_ttft for r in rs]), 13)}")
    srv = _ratio(_med([r.server_ttft for r in cold]), _med([r.server_ttft for r in warm]), 13)
    cli = _ratio(_med([r.client_ttft for r in cold]), _med([r.client_ttft for r in warm]), 13)
    print(f"{'cold/warm':32}{srv}{cli}")


def print_priority(out: dict[str, list[tuple[Reply, Reply | None]]], sizes: argparse.Namespace,
                   prefill_chunk: int, background_chunk: int) -> None:
    print(f"\n3. Priority: TTFT of a short foreground request arriving {sizes.arrival} s into a long "
          f"prompt's prefill (server --parallel 2, prefill chunk {prefill_chunk}, background chunk "
          f"{background_chunk}; median of {sizes.repeats}; seconds)")
    print(f"{'case':24}{'short prompt':>13}{'TTFT server':>13}{'TTFT client':>13}{'vs (a) srv':>12}"
          f"{'vs (a) cli':>12}{'long prompt':>13}{'long prefill s':>16}")
    labels = {"alone": "(a) alone", "background": "(b) long is background", "foreground": "(c) long is foreground"}
    base_s = _med([s.server_ttft for s, _ in out["alone"]])
    base_c = _med([s.client_ttft for s, _ in out["alone"]])
    for case in CASES:
        pairs = out[case]
        srv, cli = _med([s.server_ttft for s, _ in pairs]), _med([s.client_ttft for s, _ in pairs])
        longs = [lr for _, lr in pairs if lr is not None]
        long_p = f"{_med([lr.prompt_tokens for lr in longs]):13.0f}" if longs else f"{'-':>13}"
        long_s = _s(_med([lr.prefill_seconds for lr in longs]), 16) if longs else f"{'-':>16}"
        print(f"{labels[case]:24}{_med([s.prompt_tokens for s, _ in pairs]):13.0f}{_s(srv, 13)}{_s(cli, 13)}"
              f"{_ratio(srv, base_s, 12)}{_ratio(cli, base_c, 12)}{long_p}{long_s}")
    print("(b)'s long request is cancelled once the short one has replied, so only (c) shows the long "
          "prompt's prefill; the next case starts when the server is idle")


# ---------------------------------------------------------------- servers and the command


@contextmanager
def served(folder: Path, config: Any) -> Iterator[str]:
    """An engine and a Hypercorn server on a free loopback port; yields its URL."""
    from ..api.app import create_app
    from ..api.server import ServerThread
    from ..config import ServerConfig
    from ..engine.async_engine import AsyncEngine

    with ExitStack() as stack:
        engine = AsyncEngine(folder, config)
        engine.start()
        stack.callback(engine.stop)
        thread = ServerThread(create_app(engine, ServerConfig(port=0, engine=config)))
        url = thread.start()
        stack.callback(thread.stop)
        yield url


def _client(url: str) -> httpx.AsyncClient:
    import httpx

    return httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(900.0),
                             limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))


async def _load_tables(url: str, prompts: Prompts, sizes: argparse.Namespace, streams: list[int]
                       ) -> tuple[list[Throughput], list[Reply], list[Reply]]:
    async with _client(url) as http:
        await warm_up(http, prompts)
        rows = [await measure_throughput(http, prompts, n, sizes.requests, sizes.prompt_tokens, sizes.max_tokens)
                for n in streams]
        print_throughput(rows, sizes.max_tokens)
        cold, warm = await measure_prefix(http, prompts, sizes.prefix_tokens, sizes.repeats)
        print_prefix(cold, warm, sizes.prefix_tokens)
    return rows, cold, warm


async def _priority_table(url: str, prompts: Prompts, sizes: argparse.Namespace
                          ) -> dict[str, list[tuple[Reply, Reply | None]]]:
    async with _client(url) as http:
        await warm_up(http, prompts)
        return await measure_priority(http, prompts, sizes)


def resolve_sizes(args: argparse.Namespace) -> argparse.Namespace:
    pick = 1 if args.quick else 0
    return argparse.Namespace(**{k: (getattr(args, k) if getattr(args, k) is not None else v[pick])
                                 for k, v in SIZES.items()})


def run_serving_bench(args: argparse.Namespace) -> int:
    import torch

    from ..backends.torch.runner import pick_device, pick_dtype
    from ..checkpoints.resolve import resolve_model
    from ..config import EngineConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = resolve_sizes(args)
    try:
        streams = [int(s) for s in str(sizes.streams).split(",") if s.strip()]
    except ValueError:
        raise SystemExit("tensorfold: --streams takes counts like 1,4,8") from None
    if not streams or min(streams) < 1 or min(sizes.requests, sizes.repeats, sizes.max_tokens) < 1:
        raise SystemExit("tensorfold: --streams, --requests, --repeats and --max-tokens must be >= 1")
    folder = resolve_model(args.model)
    device = pick_device(args.device)
    dtype = str(pick_dtype(args.dtype, device)).removeprefix("torch.")
    prompts = Prompts(folder)
    base = EngineConfig()
    prefill_chunk = args.prefill_chunk if args.prefill_chunk is not None else base.prefill_chunk
    background_chunk = args.background_chunk if args.background_chunk is not None else base.background_chunk
    if prefill_chunk < 1 or background_chunk < 1:
        raise SystemExit("tensorfold: chunks must be >= 1")
    common = dict(dtype=dtype, device=str(device), threads=args.threads, kv_memory=args.kv_memory,
                  prefill_chunk=prefill_chunk, background_chunk=background_chunk)

    print(f"model {folder.name}  device {device}  dtype {dtype}  threads {torch.get_num_threads()}"
          f"{'  (quick)' if args.quick else ''}")
    print(f"1. streams {','.join(map(str, streams))} x {sizes.requests} requests, prompts ~{sizes.prompt_tokens} "
          f"tokens, replies {sizes.max_tokens} tokens; server --parallel {max(streams)}")
    print(f"2. shared prefix ~{sizes.prefix_tokens} tokens, replies {TTFT_MAX_TOKENS} tokens, "
          f"{sizes.repeats} repeats; same server")
    print(f"3. long prompt ~{sizes.long_tokens} tokens (1 reply token), short prompt ~{sizes.short_tokens} tokens "
          f"(+ question), replies {sizes.short_max_tokens} tokens, arrival {sizes.arrival} s, "
          f"{sizes.repeats} repeats; server --parallel 2, prefill chunk {prefill_chunk}, "
          f"background chunk {background_chunk}", flush=True)

    t0 = time.perf_counter()
    with served(folder, EngineConfig(parallel=max(streams), **common)) as url:
        asyncio.run(_load_tables(url, prompts, sizes, streams))
    with served(folder, EngineConfig(parallel=2, **common)) as url:
        out = asyncio.run(_priority_table(url, prompts, sizes))
    print_priority(out, sizes, prefill_chunk, background_chunk)
    print(f"\nbench serving took {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="the model (default: the built-in one)")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--kv-memory", type=float, default=None, help="GiB for each server's KV cache")
    p.add_argument("--prefill-chunk", type=int, default=None, help="prompt rows per prefill round (default 256)")
    p.add_argument("--background-chunk", type=int, default=None,
                   help="prompt rows per round for background prompts (default 64)")
    p.add_argument("--quick", action="store_true",
                   help="a very small run (sizes below in brackets). Prompt sizes count the message text; "
                        "the chat template adds its own tokens, and the tables show usage.prompt_tokens")
    d = {k: f"{v[0]} [{v[1]}]" for k, v in SIZES.items()}
    p.add_argument("--streams", default=None, help=f"1. concurrent streams, comma-separated (default {d['streams']})")
    p.add_argument("--requests", type=int, default=None, help=f"1. requests per stream (default {d['requests']})")
    p.add_argument("--prompt-tokens", type=int, default=None, help=f"1. prompt size (default {d['prompt_tokens']})")
    p.add_argument("--max-tokens", type=int, default=None, help=f"1. reply size (default {d['max_tokens']})")
    p.add_argument("--prefix-tokens", type=int, default=None,
                   help=f"2. shared prefix size (default {d['prefix_tokens']})")
    p.add_argument("--repeats", type=int, default=None, help=f"2. and 3. repeats, medians (default {d['repeats']})")
    p.add_argument("--long-tokens", type=int, default=None,
                   help=f"3. the long prompt; its prefill should last well over --arrival (default {d['long_tokens']})")
    p.add_argument("--short-tokens", type=int, default=None, help=f"3. the short prompt (default {d['short_tokens']})")
    p.add_argument("--short-max-tokens", type=int, default=None,
                   help=f"3. the short reply (default {d['short_max_tokens']})")
    p.add_argument("--arrival", type=float, default=None,
                   help=f"3. seconds between sending the long and the short request (default {d['arrival']})")
