"""`tensorfold bench decode`: single-stream prefill and decode tokens/s.

Runs this engine and Hugging Face transformers' `generate()` on the same
checkpoint folder, dtype and thread count, in one process, and prints both
and their ratio.  Greedy decoding with end tokens ignored, so both produce
exactly --new-tokens tokens; plain decoding on our side ("draft": false) and
a cold prefix cache for every run, so both do the same work.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

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


def bench_prompt(tokenizer, n_tokens: int) -> list[int]:
    ids: list[int] = []
    while len(ids) < n_tokens:
        ids += tokenizer.encode(PARAGRAPH)
    return ids[:n_tokens]


def run_engine(folder: Path, dtype: str, device: str, prompt: list[int], new_tokens: int,
               repeats: int) -> Rates:
    from ..engine.client import EngineClient
    from ..engine.types import Request, SamplingParams
    from ..config import EngineConfig

    client = EngineClient(folder, EngineConfig(dtype=dtype, device=device))
    client.start()
    prefill, decode = [], []
    try:
        for i in range(repeats + 1):          # the first run warms up
            done: queue.SimpleQueue = queue.SimpleQueue()
            client.engine.call(client.engine.cache.clear_idle)
            req = Request(id=f"bench-{i}", prompt=prompt, max_tokens=new_tokens, ignore_eos=True,
                          sampling=SamplingParams(temperature=0.0), draft=False)
            client.engine.submit(req, lambda d: d.finish and done.put(d.finish))
            fin = done.get()
            if i:
                prefill.append(len(prompt) / fin.stats.prefill_seconds)
                decode.append((new_tokens - 1) / fin.stats.decode_seconds)
    finally:
        client.stop()
    return Rates(statistics.median(prefill), statistics.median(decode))


def run_transformers(folder: Path, dtype: torch.dtype, device: torch.device, prompt: list[int],
                     new_tokens: int, repeats: int) -> Rates:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
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


def run_decode_bench(args: argparse.Namespace) -> int:
    from ..backends.torch.runner import pick_device, pick_dtype
    from ..checkpoints.resolve import resolve_model
    from ..checkpoints.tokenizer import Tokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    folder = resolve_model(args.model)
    device = pick_device(args.device)
    dtype = pick_dtype(args.dtype, device)
    prompt = bench_prompt(Tokenizer(folder), args.prompt_tokens)
    print(f"model {folder.name}  device {device}  dtype {str(dtype).removeprefix('torch.')}  "
          f"threads {torch.get_num_threads()}  prompt {len(prompt)} tokens  "
          f"new {args.new_tokens} tokens  median of {args.repeats}", flush=True)
    ours = run_engine(folder, str(dtype).removeprefix("torch."), str(device), prompt, args.new_tokens,
                      args.repeats)
    theirs = run_transformers(folder, dtype, device, prompt, args.new_tokens, args.repeats)
    print(f"{'':14}{'prefill tok/s':>16}{'decode tok/s':>16}")
    print(f"{'tensorfold':14}{ours.prefill_tps:16.1f}{ours.decode_tps:16.1f}")
    print(f"{'transformers':14}{theirs.prefill_tps:16.1f}{theirs.decode_tps:16.1f}")
    print(f"{'ratio':14}{ours.prefill_tps / theirs.prefill_tps:15.2f}x"
          f"{ours.decode_tps / theirs.decode_tps:15.2f}x")
    return 0
