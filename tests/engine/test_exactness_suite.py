"""The fast subset of `tensorfold exactness`, in-process on the tiny checkpoints: 100% identical."""

from __future__ import annotations

import pytest

from tensorfold.backends.mlx.runner import mlx_missing
from tensorfold.cli import main

ENGINES = {"torch": ["--dtype", "float32", "--device", "cpu"], "mlx": ["--engine", "mlx"],
           "hybrid": ["--dtype", "float32", "--device", "cpu"]}


@pytest.mark.parametrize("engine", ["torch", "mlx", "hybrid"])
def test_exactness_fast_subset(tiny_model, hybrid_model, capsys, engine):
    """torch: the CPU engine on the tiny Llama; mlx: the MLX engine on it; hybrid: the CPU
    engine on the tiny Qwen3.5 hybrid (drafted by the tiny Llama, which shares its
    tokenizer; one rank only)."""
    if engine == "mlx" and mlx_missing():
        pytest.skip(mlx_missing())
    model = ["--model", str(hybrid_model), "--draft-model", str(tiny_model)] if engine == "hybrid" else \
        ["--model", str(tiny_model)]
    code = main(["--log-level", "WARNING", "exactness", *model, *ENGINES[engine],
                 "--cases", "21", "--max-tokens", "32", "--preempt-cases", "2"])  # 21: every constraint form
    out = capsys.readouterr().out
    assert code == 0, out
    assert "all identical" in out
    assert "21 cases: 9 with a grammar or a forced tool call, 3 with a thinking budget" in out
    comparisons = ["concurrent (8", "reused prefix", "prefill chunk", "1 thread vs 2", "preempted", "streamed",
                   "ngram drafted vs", "ngram drafted x8", "model drafted vs", "model drafted x8"]
    for comparison in comparisons + (["2 ranks"] if engine == "torch" else []):
        line = next(l for l in out.splitlines() if comparison in l)
        done, total = (int(x) for x in line.split()[-3::2])
        assert total > 0 and done == total, line
