"""`tensorfold bench structured`: what a JSON-schema grammar costs, and what drafting gains on it.

One engine, a cold prefix cache for each reply. The constrained reply (greedy,
under a JSON schema) sets the length; the unconstrained reply decodes the same
number of tokens (end tokens ignored). Constrained replies are run drafted and
"draft": false and must be identical.
"""

from __future__ import annotations

import argparse

from .drafting import Result, run_one

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 60}, "age": {"type": "integer"},
    "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 5},
    "city": {"type": "string", "maxLength": 40}}, "required": ["name", "age", "hobbies", "city"]}
PROMPTS = ["Describe a fictional person as JSON with name, age, hobbies and city.",
           "Invent a character for a novel and give it as JSON: name, age, hobbies, city."]


def run_structured_bench(args: argparse.Namespace) -> int:
    from ..checkpoints.resolve import resolve_model
    from ..config import EngineConfig
    from ..engine.async_engine import AsyncEngine
    from ..engine.types import SamplingParams
    from ..grammar import GrammarSpec

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    client = AsyncEngine(resolve_model(args.model), EngineConfig(dtype=args.dtype, device=args.device,
                                                                  parallel=1, kv_memory=args.kv_memory))
    client.start()
    greedy = SamplingParams(temperature=0.0)
    spec = GrammarSpec.of("json_schema", SCHEMA)
    compiler = client.grammar_compiler()
    compiler.compile(spec)
    free, drafted, serial, same = Result(), Result(), Result(), 0
    try:
        tok = client.tokenizer
        for text in PROMPTS:
            ids = tok.encode(tok.render_chat([{"role": "user", "content": text}]))
            sha_d, d = run_one(client, ids, True, args.max_tokens, greedy, (compiler.constraint(spec),))
            sha_s, s = run_one(client, ids, False, args.max_tokens, greedy, (compiler.constraint(spec),))
            _, f = run_one(client, ids, False, d.tokens + 1, greedy, (), ignore_eos=True)
            same += sha_d == sha_s
            for total, part in ((drafted, d), (serial, s), (free, f)):
                total.tokens += part.tokens
                total.seconds += part.seconds
                total.drafted += part.drafted
                total.accepted += part.accepted
    finally:
        client.stop()
    print(f"model {client.model_name}  dtype {client.runner.dtype}  threads {torch.get_num_threads()}  "
          f"JSON schema, greedy, {len(PROMPTS)} prompts, {drafted.tokens} decode tokens")
    print(f"{'reply':34}{'decode tok/s':>14}")
    print(f"{'unconstrained, draft: false':34}{free.rate:14.1f}")
    print(f"{'JSON schema, draft: false':34}{serial.rate:14.1f}   grammar cost "
          f"{(1 - serial.rate / free.rate) * 100:.0f}%")
    print(f"{'JSON schema, drafted':34}{drafted.rate:14.1f}   {drafted.rate / serial.rate:.2f}x vs serial, "
          f"accepted {drafted.accepted}/{drafted.drafted}, identical {same}/{len(PROMPTS)}")
    return 0 if same == len(PROMPTS) else 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--kv-memory", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=160)
