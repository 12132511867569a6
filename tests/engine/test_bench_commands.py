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


def test_bench_decode_sampled_against_llamacpp(default_model, capsys):
    """--temperature/--top-p: both engines sample; llama.cpp's greedy-only streams figure is left out."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the `bench` extra)")
    from tensorfold.checkpoints.files import gguf_file

    if gguf_file(default_model) is None:
        pytest.skip(f"{default_model} keeps no GGUF file for llama.cpp to load")
    code = main(["--log-level", "WARNING", "bench", "decode", "--against", "llama.cpp", "--model", str(default_model),
                 "--threads", "1", "--new-tokens", "8", "--prompt-tokens", "32", "--repeats", "1", "--streams", "2",
                 "--temperature", "0.7", "--top-p", "0.9"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ratio (ours / llama.cpp)" in out and "tensorfold 2 streams" in out
    assert "sampled: temperature 0.7, top_p 0.9" in out and "llama.cpp 2 streams" not in out


@pytest.mark.parametrize("extra", [["--temperature", "0.7"], ["--top-p", "0.5", "--against", "mlx-lm"],
                                   ["--against", "llama.cpp", "--top-p", "0"]])
def test_bench_decode_sampling_settings_are_checked(tiny_model, capsys, extra):
    code = main(["--log-level", "WARNING", "bench", "decode", "--model", str(tiny_model), *extra])
    assert code == 2
    assert "--temperature" in capsys.readouterr().err


def test_bench_decode_against_mlxlm_and_its_server(tiny_model, capsys):
    """The MLX engine beside mlx-lm's generate loop (same tokens) and mlx_lm.server's streams."""
    pytest.importorskip("mlx.core")
    pytest.importorskip("mlx_lm")
    code = main(["--log-level", "WARNING", "bench", "decode", "--engine", "mlx", "--against", "mlx-lm",
                 "--model", str(tiny_model), "--new-tokens", "6", "--prompt-tokens", "16", "--repeats", "1",
                 "--streams", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ratio (ours / mlx-lm)" in out and "greedy tokens equal to mlx-lm's: the first 6 of 6" in out
    line = next(x for x in out.splitlines() if x.startswith("mlx-lm 2 streams"))
    # a rate, or n/a when the server took the two streams one after the other (a busy machine)
    assert line.split()[3] == "n/a" or math.isfinite(float(line.split()[3])), line


def test_mlx_folder_written_for_mlxlm_server_loads_the_same_model(tiny_model, tmp_path):
    """The folder mlx_lm.server is given holds the model as our loader built it: mlx-lm's own
    loader reads it back to the same logits, bit for bit."""
    mx = pytest.importorskip("mlx.core")
    pytest.importorskip("mlx_lm")
    from mlx_lm.utils import load

    from tensorfold.backends.mlx.load import load_model
    from tensorfold.bench.mlxlm_server import write_mlx_folder

    model, _ = load_model(tiny_model)
    write_mlx_folder(model, tiny_model, tmp_path / "m")
    again, tokenizer = load(str(tmp_path / "m"))
    ids = mx.array([tokenizer.encode("The lighthouse keeper wrote")])
    a, b = model(ids), again(ids)
    assert a.dtype == b.dtype and bool(mx.array_equal(a, b))


def test_lockstep_rate_counts_the_window_where_every_stream_decodes():
    from tensorfold.bench.decode import lockstep_rate

    # stream 0 tokens at 0..4 s, stream 1 at 2..8 s: window (2, 4], stream 0's 2 tokens in it, both streams
    assert lockstep_rate([[0, 1, 2, 3, 4], [2, 4, 6, 8]]) == 2 * 2 / 2
    assert math.isnan(lockstep_rate([[], []]))
