"""`tensorfold bench serving --quick` runs end to end on the tiny checkpoint and prints its three
tables with numbers. Only that: timings are the bench's output, never asserted here."""

from __future__ import annotations

import re

from tensorfold.cli import main

NUMBER = r"\d+(?:\.\d+)?"
RATIO = rf"{NUMBER}x"


def _rows(out: str, title: str, next_title: str | None) -> list[str]:
    start = out.index(title)
    end = out.index(next_title, start) if next_title else len(out)
    return [line for line in out[start:end].splitlines()[2:] if line.strip()]


def test_bench_serving_quick_prints_three_tables(tiny_model, capsys) -> None:
    rc = main(["--log-level", "WARNING", "bench", "serving", "--quick", "--model", str(tiny_model),
               "--dtype", "float32", "--device", "cpu", "--threads", "1", "--kv-memory", "0.25"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert re.search(r"^model tiny-llama\S*\s+device cpu\s+dtype float32\s+threads 1", out, re.M), out

    t1, t2, t3 = "1. Aggregate output tokens/s", "2. Time to first token", "3. Priority"
    throughput = _rows(out, t1, t2)
    assert [int(r.split()[0]) for r in throughput] == [1, 4, 8], out
    for row in throughput:       # streams, requests, prompt tokens, output tokens, wall s, tokens/s, vs 1
        assert re.fullmatch(rf"\s*{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{RATIO}", row), row
    assert int(throughput[2].split()[3]) == 8 * 8            # 8 streams x 1 request x 8 tokens (ignore_eos)

    prefix = _rows(out, t2, t3)
    cold, warm, ratio = prefix[:3]
    assert re.fullmatch(rf"cold\s+{NUMBER}\s+0\s+{NUMBER}\s+{NUMBER}", cold), cold
    assert re.fullmatch(rf"warm\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}", warm), warm
    assert int(warm.split()[2]) >= 200                       # the ~256-token prefix came from the cache
    assert re.fullmatch(rf"cold/warm\s+{RATIO}\s+{RATIO}", ratio), ratio

    priority = _rows(out, t3, "bench serving took")
    assert priority[0].startswith("(a) alone") and priority[1].startswith("(b)") and priority[2].startswith("(c)")
    for row in priority[:3]:
        assert re.search(rf"\)\s.*?\s{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{RATIO}\s+{RATIO}\s", row + " "), row
    assert re.search(rf"{NUMBER}\s+{NUMBER}$", priority[2]), priority[2]   # (c): long prompt, its prefill s
