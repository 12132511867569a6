"""`tensorfold bench drafting` and `bench structured` run and print their tables (no timings checked)."""

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
