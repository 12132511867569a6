"""The bench commands run and print their tables (no timings checked)."""

import math
import sys

import pytest

from tensorfold.cli import main


def test_bench_drafting_runs(tiny_model, capsys):
    code = main(["--log-level", "WARNING", "bench", "drafting", "--model", str(tiny_model), "--dtype", "float32",
                 "--device", "cpu", "--edit-tokens", "12", "--chat-tokens", "8", "--chat-prompts", "1",
                 "--kv-memory", "0.2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "editing" in out and "chat" in out and "1/1" in out


def test_bench_structured_runs(tiny_model, capsys):
    code = main(["--log-level", "WARNING", "bench", "structured", "--model", str(tiny_model), "--dtype", "float32",
                 "--device", "cpu", "--max-tokens", "24", "--kv-memory", "0.2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "JSON schema, drafted" in out and "identical 2/2" in out


def test_bench_quality_runs(tiny_model, capsys):
    code = main(["--log-level", "WARNING", "bench", "quality", "--model", str(tiny_model), "--tokens", "32",
                 "--windows", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "KL(ref || x)/token" in out and "top-1 agree" in out and "perplexity" in out
    ours = next(line for line in out.splitlines() if line.startswith("tensorfold"))
    kl, top1, _, ppl = ours.split()[1:]
    assert all(math.isfinite(float(x)) for x in (kl, top1, ppl)), ours
    ref = next(line for line in out.splitlines() if line.startswith("fp32 reference"))
    assert math.isfinite(float(ref.split()[-1])), ref


def test_bench_decode_llamacpp_needs_the_bench_extra(tiny_model, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)      # `import llama_cpp` now fails
    code = main(["--log-level", "WARNING", "bench", "decode", "--against", "llama.cpp", "--model", str(tiny_model)])
    err = capsys.readouterr().err
    assert code == 2
    assert "llama-cpp-python is not installed" in err and "pip install -e '.[bench]'" in err


def test_bench_decode_against_llamacpp(default_model, capsys):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the `bench` extra)")
    from tensorfold.checkpoints.files import gguf_file

    if gguf_file(default_model) is None:
        pytest.skip(f"{default_model} keeps no GGUF file for llama.cpp to load")
    code = main(["--log-level", "WARNING", "bench", "decode", "--against", "llama.cpp", "--model", str(default_model),
                 "--threads", "1", "--new-tokens", "8", "--prompt-tokens", "32", "--repeats", "1", "--streams", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ratio (ours / llama.cpp)" in out and "tensorfold 2 streams" in out and "GGUF" in out
