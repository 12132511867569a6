"""llama.cpp (through llama-cpp-python) as the engine `bench decode` and `bench quality` compare with.

Both engines get the same token ids: our tokenizer's, passed to llama.cpp as
ids (no BOS added), so they do the same work on the same positions.
llama-cpp-python comes with the `bench` extra (`pip install -e '.[bench]'`),
which builds llama.cpp from source.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

INSTALL_HINT = ("llama-cpp-python is not installed; install the bench extra with "
                "`pip install -e '.[bench]'` (it builds llama.cpp from source, which takes a while)")


class LlamaCppMissing(RuntimeError):
    pass


def import_llama_cpp() -> Any:
    """The llama_cpp module, or LlamaCppMissing with the install hint."""
    try:
        import llama_cpp
    except (ImportError, OSError, RuntimeError) as exc:     # not installed, or its library fails to load
        raise LlamaCppMissing(f"{INSTALL_HINT} ({exc})") from None
    return llama_cpp


def find_gguf(model_spec: str | None, folder: Path, explicit: str | None) -> Path | None:
    """--gguf if given; else --model when it is a .gguf file; else the GGUF the folder was converted from."""
    if explicit:
        return Path(explicit).expanduser()
    if model_spec and model_spec.lower().endswith(".gguf") and Path(model_spec).expanduser().is_file():
        return Path(model_spec).expanduser()
    from ..checkpoints.files import gguf_file

    return gguf_file(folder)


def load(gguf: Path, threads: int, n_ctx: int, logits_all: bool = False) -> Any:
    llama_cpp = import_llama_cpp()
    return llama_cpp.Llama(model_path=str(gguf), n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                           n_batch=512, logits_all=logits_all, verbose=False)


def _last_argmax(llm: Any) -> int:
    """Greedy pick from the last evaluated position (lowest id on ties, as our sampler)."""
    import llama_cpp

    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return int(np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).argmax())


def greedy(llm: Any, prompt: list[int], new_tokens: int) -> tuple[float, float, list[int]]:
    """Prefill `prompt` from a cold cache, then decode greedily: (prefill s, decode s, tokens).

    Decode time covers the tokens after the first, as our Stats.decode_seconds does.
    """
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    tokens = [_last_argmax(llm)]
    while len(tokens) < new_tokens:
        llm.eval([tokens[-1]])
        tokens.append(_last_argmax(llm))
    return t1 - t0, time.perf_counter() - t1, tokens


def window_logits(llm: Any, tokens: list[int]) -> np.ndarray:
    """Logits of every position of `tokens` from a cold cache (needs logits_all=True); a view."""
    llm.reset()
    llm.eval(tokens)
    return llm.scores[:len(tokens)]

