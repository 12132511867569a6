"""The fast subset of `tensorfold exactness`, in-process on the tiny checkpoints: 100% identical."""

from __future__ import annotations

import pytest

from tensorfold.backends.mlx.runner import mlx_missing
from tensorfold.cli import main

ENGINES = {"torch": ["--dtype", "float32", "--device", "cpu"], "mlx": ["--engine", "mlx"],
           "hybrid": ["--dtype", "float32", "--device", "cpu"], "mlx-hybrid": ["--engine", "mlx"],
           "torch-kv-int8": ["--dtype", "float32", "--device", "cpu", "--kv-cache", "int8"]}


@pytest.mark.parametrize("engine", ["torch", "torch-kv-int8", "mlx", "hybrid", "mlx-hybrid"])
def test_exactness_fast_subset(request, tiny_model, capsys, engine):
    """torch: the CPU engine on the tiny Llama (torch-kv-int8: with --kv-cache int8); mlx: the MLX engine on it; hybrid: the CPU
    engine on the tiny Qwen3.5 hybrid with a vision tower, every third case with a picture
    (drafted by a tiny Llama sharing its tokenizer); mlx-hybrid: the MLX
    engine on the text-only tiny hybrid, drafting for itself."""
    if engine.startswith("mlx") and mlx_missing():
        pytest.skip(mlx_missing())
    model = ["--model", str(tiny_model)]
    if engine == "hybrid":
        model = ["--model", str(request.getfixturevalue("vision_model")), "--images",
                 "--draft-model", str(request.getfixturevalue("vision_draft_model"))]
    if engine == "mlx-hybrid":
        model = ["--model", str(request.getfixturevalue("hybrid_model"))]
    code = main(["--log-level", "WARNING", "exactness", *model, *ENGINES[engine],
                 "--cases", "21", "--max-tokens", "32", "--preempt-cases", "2"])  # 21: every constraint form
    out = capsys.readouterr().out
    assert code == 0, out
    assert "all identical" in out
    assert "21 cases: 9 with a grammar or a forced tool call, 3 with a thinking budget" in out
    assert ("7 with an image" in out) == (engine == "hybrid")
    comparisons = ["concurrent (8", "reused prefix", "prefill chunk", "1 thread vs 2", "preempted", "streamed",
                   "ngram drafted vs", "ngram drafted x8", "model drafted vs", "model drafted x8"]
    for comparison in comparisons + (["2 ranks"] if engine in ("torch", "torch-kv-int8", "hybrid") else []):
        line = next(l for l in out.splitlines() if comparison in l)
        done, total = (int(x) for x in line.split()[-3::2])
        assert total > 0 and done == total, line
