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


def decode(llm: Any, prompt: list[int], new_tokens: int, temperature: float = 0.0,
           top_p: float = 1.0) -> tuple[float, float, list[int]]:
    """Prefill `prompt` from a cold cache, then decode: greedily, or with llama.cpp's own sampler
    chain at `temperature` and `top_p` (no top-k, min-p or penalties).  Returns (prefill s,
    decode s, tokens); decode time covers the tokens after the first, as our
    Stats.decode_seconds does."""
    def pick() -> int:
        if not temperature:
            return _last_argmax(llm)
        return int(llm.sample(top_k=0, top_p=top_p, min_p=0.0, temp=temperature))

    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    tokens = [pick()]
    while len(tokens) < new_tokens:
        llm.eval([tokens[-1]])
        tokens.append(pick())
    return t1 - t0, time.perf_counter() - t1, tokens


def window_logits(llm: Any, tokens: list[int]) -> np.ndarray:
    """Logits of every position of `tokens` from a cold cache (needs logits_all=True); a view."""
    llm.reset()
    llm.eval(tokens)
    return llm.scores[:len(tokens)]


def many(gguf: Path, threads: int, prompts: list[list[int]], new_tokens: int) -> float:
    """llama.cpp's aggregate decode tokens/s for `prompts` decoded together, as llama-server's
    parallel slots run them: one context holding a sequence per prompt, each step one batch
    with a token of every sequence (greedy), timed from the first such step to the last."""
    L = import_llama_cpp()
    n, step_tokens = len(prompts), max(len(p) for p in prompts)
    L.llama_backend_init()
    model = L.llama_model_load_from_file(str(gguf).encode(), L.llama_model_default_params())
    vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    params = L.llama_context_default_params()
    params.n_ctx, params.n_seq_max = n * -(-(step_tokens + new_tokens + 16) // 256) * 256, n
    params.n_batch = params.n_ubatch = 512
    params.n_threads = params.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, params)
    batch = L.llama_batch_init(512, 0, n)

    def decode(items: list[tuple[int, int, int, bool]]) -> None:     # (token, position, sequence, logits)
        batch.n_tokens = len(items)
        for i, (token, pos, seq, logits) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, logits
            batch.seq_id[i][0] = seq
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def pick(i: int) -> int:
        return int(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(vocab,)).argmax())

    try:
        last, pos = [], []
        for s, prompt in enumerate(prompts):
            for c in range(0, len(prompt), 512):
                part = prompt[c:c + 512]
                decode([(t, c + k, s, c + k == len(prompt) - 1) for k, t in enumerate(part)])
            last.append(pick((len(prompt) - 1) % 512))            # its row in the last batch
            pos.append(len(prompt))
        t0 = time.perf_counter()
        for step in range(new_tokens - 1):
            decode([(last[s], pos[s] + step, s, True) for s in range(n)])
            last = [pick(s) for s in range(n)]
        return n * (new_tokens - 1) / (time.perf_counter() - t0)
    finally:
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        L.llama_model_free(model)
