"""`tensorfold bench decode`: single-stream prefill and decode tokens/s against another engine.

--against transformers (the default): Hugging Face transformers' `generate()`
on the same checkpoint folder, dtype and thread count.
--against llama.cpp: llama-cpp-python on the GGUF (--gguf, or the one the
model was converted from), same thread count and the same prompt token ids;
runs alternate (ours, theirs, ours, theirs ...) in one process. It also
prints our --streams aggregate decode tokens/s next to our 1-stream figure,
our resident memory and the GGUF's size.
--against mlx-lm: mlx-lm's own generate loop on the model our MLX loader
builds (the same checkpoint, the same format), alternating the same way; run
it with --engine mlx to compare the MLX engines.

Greedy decoding with end tokens ignored, so every engine produces exactly
--new-tokens tokens; plain decoding on our side ("draft": false) and a cold
prefix cache for every run, so all do the same work.  With --temperature
(and --top-p) against llama.cpp, both engines sample instead, each with its
own sampler (so their tokens differ); llama.cpp's streams figure is greedy
only and is left out.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import queue
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PARAGRAPH = (
    "The lighthouse keeper wrote in his log every evening: the colour of the sea, the ships that "
    "passed, the birds that rested on the rail. Over forty years the entries grew shorter, yet "
    "he never missed a day, and the log became a record of the coast itself. "
)


@dataclass(slots=True)
class Rates:
    prefill_tps: float
    decode_tps: float

    @classmethod
    def median(cls, runs: list[Rates]) -> Rates:
        return cls(statistics.median(r.prefill_tps for r in runs), statistics.median(r.decode_tps for r in runs))


def lockstep_rate(times: list[list[float]]) -> float:
    """Aggregate tokens/s of streams whose token arrival times are `times`, over the window
    where all of them decode: from the last stream's first token to the first stream's last."""
    times = [t for t in times if t]
    if not times:
        return float("nan")
    start, end = max(t[0] for t in times), min(t[-1] for t in times)
    rounds = sum(start < t <= end for t in min(times, key=lambda t: t[-1]))
    return len(times) * rounds / (end - start) if rounds else float("nan")


def _streams_line(name: str, n: int, many: float, one: float) -> None:
    """The aggregate of n streams next to one stream's rate; n/a when the streams never
    decoded at the same time (a server that took them one after the other)."""
    if math.isfinite(many):
        print(f"{name} {n} streams: {many:.1f} tok/s aggregate decode, {many / one:.2f}x its 1-stream {one:.1f}")
    else:
        print(f"{name} {n} streams: n/a (the streams never decoded at the same time); its 1-stream {one:.1f}")


def bench_prompt(tokenizer, n_tokens: int) -> list[int]:
    ids: list[int] = []
    while len(ids) < n_tokens:
        ids += tokenizer.encode(PARAGRAPH)
    return ids[:n_tokens]


def our_threads(requested: int | None) -> int:
    """--threads, else the thread count our CPU engine picks by default."""
    from ..backends.host import default_threads

    return requested or default_threads()


def rss_mib() -> float:
    """This process's resident memory (VmRSS), MiB; nan where /proc is missing."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return float("nan")


class OurEngine:
    """An AsyncEngine with its thread started; one cold-cache request at a time, greedy unless
    `sampling` says otherwise."""

    def __init__(self, folder: Path, config, sampling=None) -> None:
        from ..engine.async_engine import AsyncEngine
        from ..engine.types import SamplingParams

        self.sampling = sampling or SamplingParams(temperature=0.0)
        self.client = AsyncEngine(folder, config)
        self.client.start()

    def close(self) -> None:
        self.client.stop()

    def _submit(self, prompts: list[list[int]], new_tokens: int, emit) -> None:
        from ..engine.types import Request

        self.client.core.call(self.client.core.cache.clear_idle)
        for i, prompt in enumerate(prompts):
            req = Request(id=f"bench-{time.monotonic_ns()}-{i}", prompt=prompt, max_tokens=new_tokens,
                          ignore_eos=True, sampling=self.sampling, draft=False)
            self.client.core.submit(req, lambda d, i=i: emit(i, d))

    @staticmethod
    def _check(fin) -> None:
        if fin.reason.value != "length":
            raise RuntimeError(f"a bench request ended with {fin.reason.value}: {fin.error or ''}")

    def one(self, prompt: list[int], new_tokens: int) -> tuple[Rates, list[int]]:
        done: queue.SimpleQueue = queue.SimpleQueue()
        tokens: list[int] = []

        def emit(_: int, d) -> None:
            tokens.extend(d.token_ids)
            if d.finish:
                done.put(d.finish)

        self._submit([prompt], new_tokens, emit)
        fin = done.get()
        self._check(fin)
        return Rates(len(prompt) / fin.stats.prefill_seconds,
                     (new_tokens - 1) / fin.stats.decode_seconds), tokens

    def many(self, prompts: list[list[int]], new_tokens: int) -> float:
        """Aggregate decode tokens/s while all streams decode: from the last stream's first
        token to the first stream's last one (the engine decodes them in lockstep)."""
        done: queue.SimpleQueue = queue.SimpleQueue()
        times: list[list[float]] = [[] for _ in prompts]

        def emit(i: int, d) -> None:
            if d.token_ids:
                times[i].append(time.perf_counter())
            if d.finish:
                done.put(d.finish)

        self._submit(prompts, new_tokens, emit)
        for _ in prompts:
            self._check(done.get())
        return lockstep_rate(times)


def run_engine(folder: Path, config, prompt: list[int], new_tokens: int, repeats: int) -> Rates:
    ours = OurEngine(folder, config)
    try:
        runs = [ours.one(prompt, new_tokens)[0] for _ in range(repeats + 1)][1:]   # the first warms up
    finally:
        ours.close()
    return Rates.median(runs)


def _hf_model(folder: Path):
    """The folder's model in transformers; a GGUF-backed folder's weights dequantized (as our reference)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from ..checkpoints.files import gguf_file, iter_weights

    if gguf_file(folder) is None:
        return AutoModelForCausalLM.from_pretrained(folder)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    missing, _ = model.load_state_dict(dict(iter_weights(folder)), strict=False)
    model.tie_weights()
    if set(missing) - ({"lm_head.weight"} if model.config.tie_word_embeddings else set()):
        raise ValueError(f"{folder}: weights missing for transformers: {sorted(missing)[:4]}")
    return model


def run_transformers(folder: Path, dtype: torch.dtype, device: torch.device, prompt: list[int],
                     new_tokens: int, repeats: int) -> Rates:
    import torch

    model = _hf_model(folder).to(dtype=dtype, device=device).eval()
    ids = torch.tensor([prompt], device=device)

    def timed(n: int) -> float:
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, pad_token_id=0)
        return time.perf_counter() - t0

    timed(2)                                       # warm up
    prefill, decode = [], []
    for _ in range(repeats):
        t1, tn = timed(1), timed(new_tokens)
        prefill.append(len(prompt) / t1)
        decode.append((new_tokens - 1) / (tn - t1))
    return Rates(statistics.median(prefill), statistics.median(decode))


def _table(name: str, ours: Rates, theirs: Rates) -> None:
    print(f"{'':28}{'prefill tok/s':>16}{'decode tok/s':>16}")
    print(f"{'tensorfold':28}{ours.prefill_tps:16.1f}{ours.decode_tps:16.1f}")
    print(f"{name:28}{theirs.prefill_tps:16.1f}{theirs.decode_tps:16.1f}")
    print(f"{'ratio (ours / ' + name + ')':28}{ours.prefill_tps / theirs.prefill_tps:15.2f}x"
          f"{ours.decode_tps / theirs.decode_tps:15.2f}x")


class Reference:
    """The engine compared with, side by side: `decode(prompt, n)` -> (prefill s, decode s, tokens)."""

    name = ""

    def describe(self) -> str:
        return ""

    def decode(self, prompt: list[int], new_tokens: int) -> tuple[float, float, list[int]]:
        raise NotImplementedError

    def memory_note(self) -> str:
        return ""

    def many(self, prompts: list[list[int]], new_tokens: int) -> float | None:
        """Aggregate decode tokens/s of `prompts` decoded together, where the engine can say."""
        return None

    def close(self) -> None:
        pass


class LlamaCpp(Reference):
    name = "llama.cpp"

    def __init__(self, gguf: Path, threads: int, n_ctx: int, temperature: float = 0.0, top_p: float = 1.0) -> None:
        from . import llamacpp

        self.gguf, self.threads, self.temperature, self.top_p = gguf, threads, temperature, top_p
        self.llm = llamacpp.load(gguf, threads, n_ctx)

    def describe(self) -> str:
        return f"gguf {self.gguf.name}  threads {self.threads}"

    def decode(self, prompt: list[int], new_tokens: int) -> tuple[float, float, list[int]]:
        from . import llamacpp

        return llamacpp.decode(self.llm, prompt, new_tokens, self.temperature, self.top_p)

    def memory_note(self) -> str:
        return f"; GGUF {self.gguf.stat().st_size / 2**20:.1f} MiB"

    def many(self, prompts: list[list[int]], new_tokens: int) -> float | None:
        from . import llamacpp

        if self.temperature:
            return None                                  # its streams path picks greedily
        return llamacpp.many(self.gguf, self.threads, prompts, new_tokens)

    def close(self) -> None:
        self.llm.close()


class MlxLm(Reference):
    """mlx-lm's own generate loop (generate_step, its KV cache) on the same model as our MLX
    engine loads: the same checkpoint in the same format; its streams through mlx_lm.server."""

    name = "mlx-lm"

    def __init__(self, folder: Path, tokenizer) -> None:
        from ..backends.mlx.load import load_model

        self.folder, self.tokenizer = folder, tokenizer
        self.model, _ = load_model(folder)

    def describe(self) -> str:
        return "generate_step in this process; streams: mlx_lm.server"

    def many(self, prompts: list[list[int]], new_tokens: int) -> float:
        from .mlxlm_server import MlxLmServer

        server = MlxLmServer(self.model, self.folder, len(prompts), new_tokens)
        try:
            return server.many([self.tokenizer.decode(p) for p in prompts], new_tokens)
        finally:
            server.close()

    def decode(self, prompt: list[int], new_tokens: int) -> tuple[float, float, list[int]]:
        import mlx.core as mx
        from mlx_lm.generate import generate_step

        t0 = time.perf_counter()
        first, tokens = 0.0, []
        for token, _ in generate_step(mx.array(prompt), self.model, max_tokens=new_tokens):
            tokens.append(int(token))
            first = first or time.perf_counter()
        return first - t0, time.perf_counter() - first, tokens


class OneRank(Reference):
    """This engine on one rank with all the threads the ranks have together (--against one-rank)."""

    name = "one rank"

    def __init__(self, folder: Path, config) -> None:
        self.threads = config.ranks * our_threads(config.threads)     # each rank's count, as serve picks it
        self.engine = OurEngine(folder, dataclasses.replace(config, ranks=1, threads=self.threads))

    def describe(self) -> str:
        return f"one rank of {self.threads} threads: {self.engine.client.runner.describe()}"

    def decode(self, prompt: list[int], new_tokens: int) -> tuple[float, float, list[int]]:
        rates, tokens = self.engine.one(prompt, new_tokens)
        return len(prompt) / rates.prefill_tps, (new_tokens - 1) / rates.decode_tps, tokens

    def many(self, prompts: list[list[int]], new_tokens: int) -> float:
        return self.engine.many(prompts, new_tokens)

    def close(self) -> None:
        self.engine.close()


def side_by_side(args: argparse.Namespace, folder: Path, reference, prompt: list[int],
                 prompts: list[list[int]]) -> None:
    """Ours and `reference` alternating in one process, then our --streams aggregate."""
    ours = OurEngine(folder, side_by_side_config(args, prompt), bench_sampling(args))
    rss_loaded = rss_mib()
    theirs_engine = reference()
    name = theirs_engine.name
    print(f"model {folder.name}  {theirs_engine.describe()}  engine {ours.client.runner.describe()}  "
          f"prompt {len(prompt)} tokens  new {args.new_tokens} tokens  median of {args.repeats}", flush=True)
    mine, theirs, streams = [], [], []
    try:
        for i in range(args.repeats + 1):             # alternating; the first round warms up
            rates, our_tokens = ours.one(prompt, args.new_tokens)
            step = getattr(ours.client.runner, "last_step", None)       # with ranks: a decode step's gathers
            pre_s, dec_s, their_tokens = theirs_engine.decode(prompt, args.new_tokens)
            many = ours.many(prompts, args.new_tokens)
            if i:
                mine.append(rates)
                theirs.append(Rates(len(prompt) / pre_s, (args.new_tokens - 1) / dec_s))
                streams.append(many)
        rss_end = rss_mib()
        their_many = theirs_engine.many(prompts, args.new_tokens)
    finally:
        ours.close()
        theirs_engine.close()
    ours_r = Rates.median(mine)
    _table(name, ours_r, Rates.median(theirs))
    _streams_line("tensorfold", len(prompts), statistics.median(streams), ours_r.decode_tps)
    if their_many is not None:
        _streams_line(name, len(prompts), their_many, Rates.median(theirs).decode_tps)
    same = next((k for k, (a, b) in enumerate(zip(our_tokens, their_tokens)) if a != b),
                min(len(our_tokens), len(their_tokens)))
    if args.temperature:
        print(f"sampled: temperature {args.temperature}, top_p {args.top_p}, each engine with its own sampler")
    else:
        print(f"greedy tokens equal to {name}'s: the first {same} of {args.new_tokens}")
    if step:
        print(f"exchanged per 1-stream decode step: rank 0 sent {step[1] / 1024:.1f} KiB in {step[0]} gathers")
    print(f"memory: RSS {rss_loaded:.0f} MiB after loading tensorfold, {rss_end:.0f} MiB after the runs "
          f"({name} loaded too){theirs_engine.memory_note()}")


def bench_sampling(args: argparse.Namespace):
    """Our requests' sampling: greedy, or --temperature and --top-p with a fixed seed."""
    from ..engine.types import SamplingParams

    return SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=1)


def side_by_side_config(args: argparse.Namespace, prompt: list[int]):
    """Our engine's settings in a side-by-side run: --streams lanes, prefill whole, a KV pool for the runs."""
    from ..cli import engine_config

    return dataclasses.replace(engine_config(args), parallel=max(args.streams, 1), decode_share=0.0,
                               context=args.context or run_context(prompt, args))


def run_context(prompt: list[int], args: argparse.Namespace) -> int:
    """The window one bench run needs: the prompt, its reply and a margin."""
    return len(prompt) + args.new_tokens + 16


def stream_prompts(tokenizer, prompt: list[int], n: int) -> list[list[int]]:
    """`n` prompts as long as `prompt` with distinct openings, so the streams share no cached prefix."""
    return [(tokenizer.encode(f"Log {i + 1}: ") + prompt)[:len(prompt)] for i in range(n)]


def run_decode_bench(args: argparse.Namespace) -> int:
    from ..checkpoints.resolve import resolve_model
    from ..checkpoints.tokenizer import Tokenizer
    from ..cli import engine_config
    from . import llamacpp

    against = args.against or ["transformers"]
    if (args.temperature or args.top_p < 1.0) and set(against) != {"llama.cpp"}:
        print("tensorfold: bench decode --temperature/--top-p: with --against llama.cpp only", file=sys.stderr)
        return 2
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        print("tensorfold: bench decode: --temperature >= 0 and 0 < --top-p <= 1", file=sys.stderr)
        return 2
    if "llama.cpp" in against:
        try:
            llamacpp.import_llama_cpp()
        except llamacpp.LlamaCppMissing as exc:
            print(f"tensorfold: bench decode --against llama.cpp: {exc}", file=sys.stderr)
            return 2
    folder = resolve_model(args.model)
    tokenizer = Tokenizer(folder)
    prompt = bench_prompt(tokenizer, args.prompt_tokens)
    if "llama.cpp" in against:
        gguf = llamacpp.find_gguf(args.model, folder, args.gguf)
        if gguf is None or not gguf.is_file():
            why = f"no GGUF file at {gguf}" if gguf else f"no GGUF file is known for {folder.name}"
            print(f"tensorfold: bench decode --against llama.cpp: {why}; pass --gguf PATH", file=sys.stderr)
            return 2
        side_by_side(args, folder, lambda: LlamaCpp(gguf, our_threads(args.threads), run_context(prompt, args),
                                                   args.temperature, args.top_p),
                     prompt, stream_prompts(tokenizer, prompt, args.streams))
    if "mlx-lm" in against:
        from ..backends.mlx.runner import mlx_missing

        if (why := mlx_missing()) is not None:
            print(f"tensorfold: bench decode --against mlx-lm: {why}", file=sys.stderr)
            return 2
        side_by_side(args, folder, lambda: MlxLm(folder, tokenizer), prompt,
                     stream_prompts(tokenizer, prompt, args.streams))
    if "one-rank" in against:
        if args.ranks < 2:
            print("tensorfold: bench decode --against one-rank compares --ranks 2 (or more) with one rank",
                  file=sys.stderr)
            return 2
        side_by_side(args, folder, lambda: OneRank(folder, side_by_side_config(args, prompt)), prompt,
                     stream_prompts(tokenizer, prompt, args.streams))
    if "transformers" in against:
        import torch

        from ..backends.torch.runner import pick_device, pick_dtype

        if args.threads:
            torch.set_num_threads(args.threads)
        device = pick_device(args.device)
        dtype = pick_dtype(args.dtype, device)
        print(f"model {folder.name}  device {device}  dtype {str(dtype).removeprefix('torch.')}  "
              f"threads {torch.get_num_threads()}  prompt {len(prompt)} tokens  "
              f"new {args.new_tokens} tokens  median of {args.repeats}", flush=True)
        config = dataclasses.replace(engine_config(args), dtype=str(dtype).removeprefix("torch."),
                                     device=str(device))
        ours = run_engine(folder, config, prompt, args.new_tokens, args.repeats)
        theirs = run_transformers(folder, dtype, device, prompt, args.new_tokens, args.repeats)
        _table("transformers", ours, theirs)
    return 0
