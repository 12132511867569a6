"""`tensorfold serve | pull | models | bench`."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .config import AUTO_LANES, KV_CACHES, EngineConfig, Limits, SamplingDefaults, ServerConfig

log = logging.getLogger("tensorfold")


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None,
                   help="a local Hugging Face folder, a .gguf file, a Hugging Face repo id, "
                        "or nothing for the built-in default (SmolLM2-135M-Instruct)")
    p.add_argument("--engine", default="auto", choices=["auto", "torch", "mlx"],
                   help="torch (native CPU kernels, or CUDA) or Apple's MLX; auto: MLX on Apple silicon, "
                        "else torch")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"],
                   help="CUDA weights and activations (auto: bfloat16); the CPU computes in float32")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    p.add_argument("--weights", default="auto", choices=["auto", "q8_0", "q4_0", "bf16"],
                   help="CPU weight format: a GGUF runs as stored; a safetensors checkpoint is quantized "
                        "at load (auto: q8_0)")
    p.add_argument("--kv-cache", default="fp16", choices=list(KV_CACHES),
                   help="CPU KV cache: fp16, or int8 (half the memory and reads; each position's key and value "
                        "of a kv head as int8 codes with one scale)")
    p.add_argument("--context", type=int, default=None, help="served context window (default: the model's)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: the machine's cores); replies are the same at any count")
    p.add_argument("--ranks", type=int, default=1,
                   help="processes the model is split across (CPU: gloo; replies are the same as on one); "
                        "serve starts the others itself, or run it under torchrun")
    p.add_argument("--parallel", default="auto",
                   help="requests sharing rounds: auto (%d lanes within memory) or N" % AUTO_LANES)
    p.add_argument("--decode-share", type=float, default=0.25,
                   help="decode time between prefill chunks, as a share of each chunk's time "
                        "(0 prefills each prompt whole first)")
    p.add_argument("--prefill-chunk", type=int, default=256, help="prompt rows per prefill round")
    p.add_argument("--background-chunk", type=int, default=64,
                   help="prompt rows per prefill round for background requests")
    p.add_argument("--draft-model", default=None,
                   help="a smaller model with the same tokenizer that drafts tokens "
                        "(default: prompt lookup, no extra model)")
    p.add_argument("--kv-memory", type=float, default=None,
                   help="GiB for the KV cache (default: available memory less a reserve)")
    p.add_argument("--cache-idle", type=float, default=300.0, metavar="SECONDS",
                   help="CPU engine: after this long without requests the prefix cache is forgotten and its "
                        "memory goes back to the system (default 300; 0: as soon as the engine is idle)")
    p.add_argument("--chat-template", default=None, metavar="FILE",
                   help="a Jinja chat template file that replaces the checkpoint's own")
    p.add_argument("--vision", action="store_true",
                   help="load the checkpoint's vision tower and take image parts (Qwen3.5 checkpoints; the CPU "
                        "engine); limits: --limit images=8 image_bytes=20971520 image_pixels=50000000")
    p.add_argument("--mmproj", default=None, metavar="FILE",
                   help="with --vision and a GGUF model: the vision tower as llama.cpp's mmproj GGUF "
                        "(default: the one mmproj*.gguf beside the model's file)")


def engine_config(args: argparse.Namespace) -> EngineConfig:
    parallel = 0 if args.parallel == "auto" else int(args.parallel)
    if parallel < 0 or not 0 <= args.decode_share <= 1 or args.prefill_chunk < 1 or args.background_chunk < 1 \
            or not 0 <= args.cache_idle < float("inf"):
        raise SystemExit("tensorfold: --parallel must be auto or N >= 1, --decode-share within 0..1, "
                         "chunks >= 1, --cache-idle a number of seconds >= 0")
    return EngineConfig(model=args.model, engine=args.engine, dtype=args.dtype, device=args.device, weights=args.weights,
                        kv_cache=args.kv_cache, context=args.context,
                        threads=args.threads, ranks=args.ranks, parallel=parallel, prefill_chunk=args.prefill_chunk,
                        background_chunk=args.background_chunk, decode_share=args.decode_share,
                        kv_memory=args.kv_memory, cache_idle=args.cache_idle, draft_model=args.draft_model,
                        chat_template=_read_template(args.chat_template), vision=getattr(args, "vision", False),
                        mmproj=getattr(args, "mmproj", None))


def _read_template(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise SystemExit(f"tensorfold: --chat-template {path}: {exc.strerror or exc}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorfold", description="A local OpenAI-compatible LLM server.",
                                     fromfile_prefix_chars="@")
    parser.add_argument("--version", action="version", version=f"tensorfold {__version__}")
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve a model at http://HOST:PORT/v1")
    _engine_args(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--served-model-name", default=None, help="the model id clients see")
    serve.add_argument("--alias", action="append", default=[], help="another model id to answer to")
    serve.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1")
    serve.add_argument("--allowed-origins", action="append", default=[], metavar="ORIGIN",
                       help="a web page origin (scheme://host[:port]) that may call /v1 from a browser, "
                            "with CORS; repeatable, or '*' for any (default: only the server's own pages)")
    serve.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                       help="a request limit, repeatable: " + ", ".join(
                           f"{f.name} (default {f.default})" for f in dataclasses.fields(Limits)))
    serve.add_argument("--tool-parser", default=None,
                       choices=["qwen_xml", "hermes", "gemma4", "glm", "json"],
                       help="tool-call format of the model's replies (default: from its chat template; a ChatML "
                            "template without one gets the built-in Hermes tool prompt)")
    serve.add_argument("--reasoning-effort", default=None,
                       choices=["none", "minimal", "low", "medium", "high", "xhigh"],
                       help="effort for requests that send none (default: the template's own)")
    serve.add_argument("--thinking-budget", type=int, default=None,
                       help="close a think block still open after this many reply tokens (default: no limit)")
    serve.add_argument("--max-tokens", type=int, default=None,
                       help="default reply limit (default: the remaining context)")
    serve.add_argument("--temperature", type=float, default=1.0)
    serve.add_argument("--top-p", type=float, default=1.0)
    serve.add_argument("--top-k", type=int, default=0)
    serve.add_argument("--min-p", type=float, default=0.0)

    pull = sub.add_parser("pull", help="download and convert a model into the cache")
    pull.add_argument("model", nargs="?", default=None, help="default: the built-in default model")

    sub.add_parser("models", help="list cached models")

    from .exactness import add_arguments as exactness_arguments

    exactness_arguments(sub.add_parser("exactness", help="check that every reply equals its solo run"))

    bench = sub.add_parser("bench", help="measure this engine")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    decode = bench_sub.add_parser("decode", help="single-stream prefill and decode tokens/s vs another engine")
    _engine_args(decode)
    decode.add_argument("--against", action="append", choices=["transformers", "llama.cpp", "mlx-lm", "one-rank"],
                        help="the engine to compare with; repeatable (default: transformers); one-rank: this "
                             "engine on one rank with --ranks times --threads threads (with --ranks 2)")
    decode.add_argument("--gguf", default=None,
                        help="the GGUF llama.cpp loads (default: the one the model was converted from)")
    decode.add_argument("--prompt-tokens", type=int, default=512)
    decode.add_argument("--new-tokens", type=int, default=128)
    decode.add_argument("--repeats", type=int, default=3)
    decode.add_argument("--streams", type=int, default=8,
                        help="concurrent requests for our aggregate decode figure (with llama.cpp, mlx-lm)")
    decode.add_argument("--temperature", type=float, default=0.0,
                        help="sample at this temperature instead of greedy, both engines (with llama.cpp)")
    decode.add_argument("--top-p", type=float, default=1.0, help="top-p with --temperature (with llama.cpp)")
    from .bench.quality import add_arguments as quality_arguments

    quality_arguments(bench_sub.add_parser(
        "quality", help="KL divergence, top-1 agreement and perplexity vs an fp32 reference (and llama.cpp)"))
    from .bench.serving import add_arguments as serving_arguments

    serving_arguments(bench_sub.add_parser(
        "serving", help="over HTTP: tokens/s at 1/4/8 streams, cached-prefix TTFT, background priority"))
    from .bench.drafting import add_arguments as drafting_arguments

    drafting_arguments(bench_sub.add_parser(
        "drafting", help="decode tokens/s with drafts vs draft:false on editing and chat workloads"))
    from .bench.structured import add_arguments as structured_arguments

    structured_arguments(bench_sub.add_parser(
        "structured", help="decode tokens/s under a JSON schema vs unconstrained, drafted vs serial"))
    return parser


def _serve(args: argparse.Namespace) -> int:
    from .ranks import torchrun_rank

    if (started := torchrun_rank()) and started[0] != 0:      # torchrun's other ranks follow rank 0
        return _follow(args, *started)
    from .api.app import create_app
    from .api.edge.origins import AllowedOrigins
    from .api.server import bind_socket, serve, url_for
    from .checkpoints.resolve import resolve_model
    from .engine.async_engine import AsyncEngine

    try:
        AllowedOrigins.parse(args.allowed_origins)
    except ValueError as exc:
        raise SystemExit(f"tensorfold: --allowed-origins: {exc}") from None
    try:                # before the model loads: a used port is a clear error, not a traceback after it
        bind_socket(args.host, args.port).close()
    except OSError as exc:
        raise SystemExit(f"tensorfold: cannot listen on {url_for(args.host, args.port)}: "
                         f"{exc.strerror or exc} (another server there? pick another --port)") from None
    try:
        limits = Limits.parse(args.limit)
    except ValueError as exc:
        raise SystemExit(f"tensorfold: --limit {exc}") from None
    engine_cfg = engine_config(args)
    config = ServerConfig(
        host=args.host, port=args.port, served_model_name=args.served_model_name,
        aliases=tuple(args.alias), api_key=args.api_key, allowed_origins=tuple(args.allowed_origins),
        max_tokens=args.max_tokens,
        tool_parser=args.tool_parser, reasoning_effort=args.reasoning_effort,
        thinking_budget=args.thinking_budget,
        sampling=SamplingDefaults(args.temperature, args.top_p, args.top_k, args.min_p),
        engine=engine_cfg, limits=limits,
    )
    folder = resolve_model(args.model)
    engine = AsyncEngine(folder, engine_cfg)
    engine.start()
    try:
        log.info("model folder %s", folder)
        serve(create_app(engine, config), config)
    finally:
        engine.stop()
    return 0


def _follow(args: argparse.Namespace, rank: int, world: int, host: str, port: int) -> int:
    from .checkpoints.resolve import resolve_model
    from .ranks.launch import run_follower, torchrun_store

    if world != args.ranks:
        raise SystemExit(f"tensorfold: torchrun started {world} ranks; --ranks says {args.ranks}")
    return run_follower(str(resolve_model(args.model)), rank, world, host, port, args.weights, args.threads,
                        store=torchrun_store(rank, world, host, port), kv_cache=args.kv_cache)


def _pull(args: argparse.Namespace) -> int:
    from .checkpoints.resolve import resolve_model

    folder = resolve_model(args.model)
    print(folder)
    return 0


def _models(args: argparse.Namespace) -> int:
    from .checkpoints.resolve import list_cached

    rows = list_cached()
    if not rows:
        print("no cached models; `tensorfold pull` fetches the default one")
    for m in rows:
        print(f"{m.name:48} {m.size / 2**20:9.1f} MiB  {m.source:8} {m.path}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.bench == "structured":
        from .bench.structured import run_structured_bench

        return run_structured_bench(args)
    if args.bench == "drafting":
        from .bench.drafting import run_drafting_bench

        return run_drafting_bench(args)
    if args.bench == "quality":
        from .bench.quality import run_quality_bench

        return run_quality_bench(args)
    if args.bench == "serving":
        from .bench.serving import run_serving_bench

        return run_serving_bench(args)
    from .bench.decode import run_decode_bench

    return run_decode_bench(args)


def _exactness(args: argparse.Namespace) -> int:
    from .exactness import run_exactness

    return run_exactness(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .checkpoints.errors import CheckpointError
    from .native.lib import NativeMissing

    handlers = {"serve": _serve, "pull": _pull, "models": _models, "bench": _bench, "exactness": _exactness}
    try:
        return handlers[args.command](args)
    except (CheckpointError, NativeMissing) as exc:
        print(f"tensorfold: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
