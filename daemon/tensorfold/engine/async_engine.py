"""AsyncEngine: the asyncio face of the engine thread (`core`, loop.py's Engine).

What the HTTP edge and the benches call "the engine". `generate()` hands a Request to the engine thread and yields its Deltas; an
asyncio.Queue per request is fed from the engine thread with
`loop.call_soon_threadsafe`. Leaving the iterator early (client disconnect,
cancellation) aborts the request at the engine's next round.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..backends.host import device_kind, release_freed_memory
from ..checkpoints.errors import CheckpointError, UnsupportedModel
from ..checkpoints.resolve import resolve_model
from ..checkpoints.tokenizer import Tokenizer
from ..config import AUTO_LANES, EngineConfig
from .capacity import GiB, KVPlan, plan_kv
from .drafting.model import DraftModelDrafter
from .drafting.ngram import NgramDrafter
from .loop import Engine, EngineLimits
from .states import plan_snapshots, state_bytes, state_slots
from .types import Delta, Request

log = logging.getLogger(__name__)


def make_runner(folder: Path, config: EngineConfig) -> Any:
    """MLX when asked (auto: on Apple silicon); else the CPU runs the native kernels (weights
    kept quantized, torch never imported for a GGUF) and CUDA runs torch."""
    if config.ranks < 1:
        raise UnsupportedModel(f"--ranks {config.ranks}: give 1 or more")
    if pick_engine(config) == "mlx":
        if config.ranks > 1:
            raise UnsupportedModel("--ranks applies to the torch engine; MLX serves on one rank")
        if torch_settings(config):
            raise UnsupportedModel("--dtype, --weights, --kv-cache and --device apply to the torch engine; MLX "
                                   "runs on its default device in the checkpoint's format (float32 on a CPU)")
        from ..backends.mlx.runner import MLXRunner, mlx_missing

        if (why := mlx_missing()) is not None:
            raise UnsupportedModel(why)
        return MLXRunner(folder, threads=config.threads)
    if device_kind(config.device) == "cpu":
        if config.dtype not in ("auto", "float32"):
            raise UnsupportedModel(f"--dtype {config.dtype} applies to CUDA; the CPU engine computes in float32 "
                                   "and --weights picks how weights are stored")
        if config.ranks > 1:
            from ..ranks.launch import start_leader

            return start_leader(folder, config)
        from ..native.runner import NativeRunner

        return NativeRunner(folder, weights=config.weights, threads=config.threads, kv_cache=config.kv_cache)
    if config.ranks > 1:
        raise UnsupportedModel("--ranks applies to the CPU engine (gloo); CUDA serves on one rank in this version")
    if config.weights != "auto":
        raise UnsupportedModel("--weights applies to the CPU engine; CUDA runs --dtype")
    if config.kv_cache != "fp16":
        raise UnsupportedModel(f"--kv-cache {config.kv_cache} applies to the CPU engine; CUDA keeps its KV cache "
                               "in --dtype")
    import torch

    from ..backends.torch.runner import TorchRunner

    if config.threads:
        torch.set_num_threads(config.threads)
    return TorchRunner(folder, dtype=config.dtype, device=config.device)


def torch_settings(config: EngineConfig) -> bool:
    """Whether a setting only the torch engine takes (--dtype, --weights, --kv-cache, --device) was given."""
    return (config.dtype, config.weights, config.kv_cache, config.device) != ("auto", "auto", "fp16", "auto")


def pick_engine(config: EngineConfig) -> str:
    """--engine; auto is MLX on Apple silicon where mlx is installed (the mlx extra) and no
    torch-only setting was given, else torch."""
    import platform

    if config.engine != "auto":
        return config.engine
    if platform.system() != "Darwin" or platform.machine() != "arm64":
        return "torch"
    from ..backends.mlx.runner import mlx_missing

    return "torch" if torch_settings(config) or mlx_missing() else "mlx"


class AsyncEngine:
    def __init__(self, folder: Path, config: EngineConfig) -> None:
        self.folder = folder
        self.model_name = folder.name
        self.tokenizer = Tokenizer(folder)
        if config.chat_template:
            self.tokenizer.chat_template = config.chat_template
        self.runner = make_runner(folder, config)
        self.vision = self._vision(folder, config)
        lanes = config.parallel or AUTO_LANES
        budget = int(config.kv_memory * GiB) if config.kv_memory else self.runner.free_memory()
        snapshots = 0
        if state := state_bytes(self.runner):          # a hybrid's state slots come first
            snapshots = plan_snapshots(lanes, state, budget)
            budget -= state_slots(lanes, snapshots) * state
            log.info("deltanet states: %d slots of %.2f MiB (%d for prefix snapshots)",
                     state_slots(lanes, snapshots), state / 2**20, snapshots)
        plan = plan_kv(self.runner.kv_bytes_per_token(), self.runner.max_positions, config.context,
                       lanes, config.block_size, budget)
        self.context_length = plan.context_length
        self.kv_plan = plan
        self.lanes = lanes
        self._grammar: Any = None
        self._grammar_lock = threading.Lock()
        self.drafter = self._drafter(config, plan) if config.draft_model else NgramDrafter()
        self.core = Engine(self.runner, self.tokenizer, EngineLimits(
            lanes=lanes, num_blocks=plan.num_blocks, block_size=plan.block_size,
            prefill_chunk=config.prefill_chunk, background_chunk=config.background_chunk,
            decode_share=config.decode_share, snapshots=snapshots or lanes,
            cache_idle=config.cache_idle if getattr(self.runner, "trims_kv", False) else None),
            drafter=self.drafter)
        # Everything loaded so far lives as long as the server: keep it out of the
        # collector's walks, which otherwise cost a decode round ~10% of its time.
        gc.collect()
        gc.freeze()
        release_freed_memory()       # what loading freed (about 50 MB for the default model)

    def _vision(self, folder: Path, config: EngineConfig) -> Any:
        """--vision: the checkpoint's vision tower (vision/encoder.py); refused where images
        cannot run (no tower, or an engine other than the CPU one)."""
        if not config.vision:
            if config.mmproj:
                raise CheckpointError("--mmproj gives the vision tower that --vision loads; pass both")
            return None
        from ..vision.encoder import VisionEncoder, has_vision_tower, mmproj_beside

        tower = has_vision_tower(folder)
        mmproj = config.mmproj or (None if tower else mmproj_beside(folder))
        if not mmproj and not tower:
            raise CheckpointError(f"--vision: {folder.name} has no vision tower (a Qwen3.5 checkpoint with its "
                                  "vision_config and model.visual weights takes images; for a GGUF, give its "
                                  "mmproj file with --mmproj, or put the one mmproj*.gguf beside it)")
        if not getattr(self.runner, "image_inputs", None) or not self.runner.model.struct.mrope[0]:
            raise CheckpointError("--vision runs on the CPU engine with a Qwen3.5 checkpoint")
        vision = (VisionEncoder.from_mmproj(Path(mmproj), self.tokenizer.hf) if mmproj
                  else VisionEncoder.from_folder(folder))
        log.info("vision tower of %s loaded: images are taken", mmproj or folder.name)
        return vision

    def _drafter(self, config: EngineConfig, plan: KVPlan) -> DraftModelDrafter:
        """Load --draft-model; refuse it unless it shares the target's tokenizer."""
        folder = resolve_model(config.draft_model)
        tokenizer = Tokenizer(folder)
        if not tokenizer.same_vocabulary(self.tokenizer) or \
                tokenizer.eos_token_ids != self.tokenizer.eos_token_ids:
            raise CheckpointError(f"--draft-model {folder.name} does not use the tokenizer of "
                                  f"{self.model_name}; a draft model must share its target's tokenizer")
        runner = make_runner(folder, replace(config, ranks=1))     # drafts on rank 0; verified on every rank
        log.info("drafting with %s", folder.name)
        return DraftModelDrafter(runner, plan.num_blocks, plan.block_size, config.prefill_chunk,
                                 lanes=config.parallel or AUTO_LANES)

    def grammar_compiler(self, timeout: float | None = None) -> Any:
        """The grammar compiler for this tokenizer: grammar/remote.py's host, whose process
        holds xgrammar (and the torch it imports), started here when it is not running,
        which takes a few seconds: call it off the event loop. `timeout`: seconds one
        compile may take, when given."""
        with self._grammar_lock:
            if self._grammar is None:
                from ..grammar.remote import GrammarHost

                self._grammar = GrammarHost(self.tokenizer.folder, vocab_size=self.runner.vocab_size)
            if timeout is not None:
                self._grammar.timeout = timeout
            self._grammar.start()
            return self._grammar

    def start(self) -> None:
        self.core.start()

    def stop(self) -> None:
        self.core.stop()
        if hasattr(self.runner, "close"):          # the other ranks, when there are some
            self.runner.close()
        if self._grammar is not None:
            self._grammar.close()
            self._grammar.join()

    def end_all(self, message: str) -> None:
        """Fail every request in flight, and every later one, with `message`, and stop the
        grammar compiles (shutdown); returns at once."""
        self.core.end_all(message)
        if self._grammar is not None:
            self._grammar.close()

    @property
    def down(self) -> str | None:
        """Why the engine cannot serve until it is restarted (a rank failed), or None."""
        return getattr(self.runner, "down", None)

    def health(self) -> dict[str, int | float | bool | str]:
        down = {"down": self.down} if self.down else {}
        return {**self.core.counters.snapshot(), "drafter": self.drafter.name,
                "engine": self.runner.describe(),
                "parallel": self.lanes, **down}

    async def generate(self, request: Request) -> AsyncIterator[Delta]:
        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue[Delta] = asyncio.Queue()

        def emit(delta: Delta) -> None:
            try:
                loop.call_soon_threadsafe(deltas.put_nowait, delta)
            except RuntimeError:      # the event loop is gone: nobody is listening
                pass

        seq = self.core.submit(request, emit)
        finished = False
        try:
            while not finished:
                delta = await deltas.get()
                finished = delta.finish is not None
                yield delta
        finally:
            if not finished:
                self.core.abort(seq)
