"""`tensorfold bench quality`: how far our engine's logits are from an fp32 reference.

On a fixed English text that ships with Python (the language reference's
help topics, `pydoc_data.topics`), cut into --windows windows of --tokens
tokens with no overlap, each scored from an empty cache:

- our engine's runner (the one AsyncEngine builds for the CPU) against the
  fp32 reference `TorchRunner(folder, "float32", "cpu")`: mean KL(ref || ours)
  per token and top-1 agreement over every position;
- the perplexity of each (every position predicting the next token);
- with llama-cpp-python installed and the GGUF known (--gguf, or the one the
  model was converted from): llama.cpp's figures on the same token ids.

Figures are accumulated window by window, so at most one window's logits per
engine are held at a time.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

ROWS = 128       # rows per log-softmax step, to bound temporaries on large vocabularies


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="a model folder, a .gguf file, a repo id (default: the default model)")
    p.add_argument("--gguf", default=None, help="the GGUF llama.cpp loads (default: the one the model came from)")
    p.add_argument("--tokens", type=int, default=512, help="tokens per window")
    p.add_argument("--windows", type=int, default=8, help="windows of the text to score")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for every engine (default: torch's)")
    p.add_argument("--weights", default="auto", choices=["auto", "q8_0", "q4_0", "bf16"],
                   help="our weight format for a safetensors checkpoint (a GGUF runs as stored)")


def reference_text() -> tuple[str, str]:
    """(name, text): a fixed English text that ships with Python."""
    from pydoc_data.topics import topics

    return "pydoc_data.topics", "\n\n".join(topics[k] for k in sorted(topics))


@dataclass(slots=True)
class Score:
    """Running sums against the reference."""

    kl: float = 0.0
    top1: int = 0
    rows: int = 0
    nll: float = 0.0
    predicted: int = 0

    def add(self, ref: Any, logits: Any, tokens: list[int]) -> None:
        """Score the window `tokens` (fp32 logits [tokens, vocab], tensors or arrays)."""
        import torch

        ref, logits = torch.as_tensor(ref), torch.as_tensor(logits)
        vocab = min(ref.shape[1], logits.shape[1])
        targets = torch.tensor(tokens[1:] + [0])
        for r in range(0, len(tokens), ROWS):
            ref_lp = torch.log_softmax(ref[r:r + ROWS, :vocab].float(), dim=-1)
            lp = torch.log_softmax(logits[r:r + ROWS, :vocab].float(), dim=-1)
            self.kl += float((ref_lp.exp() * (ref_lp - lp)).sum())
            self.top1 += int((ref_lp.argmax(-1) == lp.argmax(-1)).sum())
            nll = -lp.gather(1, targets[r:r + ROWS, None])[:, 0]
            self.nll += float(nll[:len(tokens) - 1 - r].sum())      # the window's last row predicts nothing
        self.rows += len(tokens)
        self.predicted += len(tokens) - 1

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll / self.predicted)


def runner_logits(runner: Any, tokens: list[int], block_size: int) -> Any:
    """Every position's logits for `tokens`, from position 0 of the runner's (small) pool."""
    seg = runner.segment(list(range(-(-len(tokens) // block_size))), 0, len(tokens))
    return runner.forward(tokens, [seg], list(range(len(tokens))))


def run_quality_bench(args: argparse.Namespace) -> int:
    import torch

    from ..backends.torch.runner import TorchRunner
    from ..checkpoints.resolve import resolve_model
    from ..checkpoints.tokenizer import Tokenizer
    from ..config import EngineConfig
    from ..engine.async_engine import AsyncEngine
    from . import llamacpp
    from .decode import our_threads

    if args.threads:
        torch.set_num_threads(args.threads)
    folder = resolve_model(args.model)
    name, text = reference_text()
    ids = Tokenizer(folder).encode(text[:args.tokens * args.windows * 8])
    windows = [ids[i:i + args.tokens] for i in range(0, len(ids) - args.tokens + 1, args.tokens)][:args.windows]
    if not windows or args.tokens < 2:
        raise SystemExit(f"tensorfold: {name} has fewer than --tokens {args.tokens} tokens (need >= 2)")

    client = AsyncEngine(folder, EngineConfig(device="cpu", threads=args.threads, parallel=1, weights=args.weights,
                                               context=args.tokens))   # its runner; the engine never starts
    ours, reference = client.runner, TorchRunner(folder, dtype="float32", device="cpu")
    block = 32
    for runner in (ours, reference):
        runner.allocate_kv(-(-args.tokens // block), block)

    llm, note = None, ""
    try:
        llamacpp.import_llama_cpp()
        gguf = llamacpp.find_gguf(args.model, folder, args.gguf)
        if gguf is not None and gguf.is_file():
            llm = llamacpp.load(gguf, our_threads(args.threads), n_ctx=args.tokens, logits_all=True)
        else:
            note = f"llama.cpp: skipped, no GGUF known for {folder.name} (pass --gguf PATH)"
    except llamacpp.LlamaCppMissing:
        note = f"llama.cpp: skipped; {llamacpp.INSTALL_HINT}"

    print(f"model {folder.name}  ours {ours.describe()}  reference torch float32  "
          f"text {name}: {len(windows)} windows x {args.tokens} tokens  threads {our_threads(args.threads)}",
          flush=True)
    ref_score, our_score, llama_score = Score(), Score(), Score()
    with torch.inference_mode():
        for tokens in windows:
            ref = runner_logits(reference, tokens, block)
            ref_score.add(ref, ref, tokens)
            our_score.add(ref, runner_logits(ours, tokens, block), tokens)
            if llm is not None:
                llama_score.add(ref, torch.from_numpy(llamacpp.window_logits(llm, tokens)), tokens)

    print(f"{'':20}{'KL(ref || x)/token':>20}{'top-1 agree':>14}{'perplexity':>12}")
    print(f"{'fp32 reference':20}{'-':>20}{'-':>14}{ref_score.perplexity:12.3f}")
    rows = [("tensorfold", our_score)] + ([("llama.cpp", llama_score)] if llm is not None else [])
    for label, s in rows:
        print(f"{label:20}{s.kl / s.rows:20.5f}{100 * s.top1 / s.rows:12.2f} %{s.perplexity:12.3f}")
    if llm is not None:
        print(f"perplexity ratio tensorfold / llama.cpp: {our_score.perplexity / llama_score.perplexity:.4f}x")
    if note:
        print(note)
    return 0
