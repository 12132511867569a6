"""Two ranks (--ranks 2, gloo): the model split along every linear's outputs gives
the logits of one rank bit for bit; a rank that dies or hangs puts the server down
(in-flight replies end with an error, /health says degraded, later requests 503)
and nothing hangs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from tensorfold.checkpoints.errors import CheckpointError
from tensorfold.config import EngineConfig
from tensorfold.native.runner import NativeRunner
from tensorfold.native.shard import Shard, bounds
from tensorfold.ranks import launch
from tensorfold.ranks.launch import start_leader
from tests.engine.conftest import engine_on
from tests.tiny import make_tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, default_model, hybrid_model):
    """Llama (the default model's GGUF: Q4_1, a tied head, 3 kv heads split 1 + 2), Qwen2 (q, k, v
    biases) and Qwen3 (per-head norms) tiny random checkpoints; the tiny Qwen3.5 hybrid from
    safetensors and as a qwen35 GGUF (its value heads in llama.cpp's tiled order)."""
    from tensorfold.checkpoints.files import gguf_file
    from tensorfold.checkpoints.gguf_convert import convert_gguf
    from tests.tiny import write_hybrid_gguf

    root = tmp_path_factory.mktemp("ranks")
    gguf = write_hybrid_gguf(hybrid_model, root / "hybrid.gguf", gguf_file(default_model))
    return {"default": default_model,
            "qwen2": make_tiny_checkpoint(root / "qwen2", default_model, arch="Qwen2ForCausalLM", seed=3,
                                          heads=6, kv_heads=3, hidden=96),
            "qwen3": make_tiny_checkpoint(root / "qwen3", default_model, arch="Qwen3ForCausalLM", seed=4),
            "hybrid": hybrid_model, "hybrid-gguf": convert_gguf(gguf, root / "hybrid-gguf")}


def test_split_plan():
    assert bounds(576, 2, 16) == [0, 288, 576] and bounds(3, 2) == [0, 1, 3] and bounds(100, 2, 16) == [0, 48, 100]
    s = Shard.plan(1, 2, heads=9, kv_heads=3, head_dim=64, hidden=576, ffn=1536, vocab=49152)
    assert (s.kv, s.own("kv"), s.own("ffn"), s.own("vocab")) == ([0, 1, 3], (1, 3), (768, 1536), (24576, 49152))
    with pytest.raises(CheckpointError, match="1 kv head"):
        Shard.plan(0, 2, heads=4, kv_heads=1, head_dim=64, hidden=256, ffn=512, vocab=1000)
    with pytest.raises(CheckpointError, match="head_dim 8"):
        Shard.plan(0, 2, heads=4, kv_heads=2, head_dim=8, hidden=32, ffn=64, vocab=1000)


def test_hybrid_split_plan():
    """A deltanet splits by key head; each rank keeps the value heads that read its keys: a
    run of them grouped by key head, every k_heads-th one in llama.cpp's tiled order."""
    from tensorfold.checkpoints.qwen35 import HybridArgs

    h = HybridArgs(kinds=(1, 1, 1, 0), rot_dim=8, k_heads=3, v_heads=6, k_dim=16, v_dim=32, conv_k=4)
    sizes = dict(heads=4, kv_heads=2, head_dim=32, hidden=64, ffn=128, vocab=1000, hybrid=h)
    grouped, tiled = Shard.plan(1, 2, **sizes), Shard.plan(1, 2, **sizes, tiled=True)
    assert grouped.dn_keys == tiled.dn_keys == [0, 1, 3]
    assert grouped.dn_values == [[0, 1], [2, 3, 4, 5]] and tiled.dn_values == [[0, 3], [1, 2, 4, 5]]
    local = tiled.deltanet(h)
    assert (local.k_heads, local.v_heads, local.conv_dim) == (2, 4, 2 * 2 * 16 + 4 * 32)
    qkv, z = tiled.deltanet_rows(h)          # q and k of key heads 1, 2; v and z of value heads 1, 2, 4, 5
    assert qkv == [(16, 48), (64, 96), (128, 160), (160, 192), (224, 256), (256, 288)]
    assert z == [(32, 64), (64, 96), (128, 160), (160, 192)]
    with pytest.raises(CheckpointError, match="1 deltanet key head"):
        Shard.plan(0, 2, **{**sizes, "hybrid": HybridArgs((1, 0), 8, 1, 2, 16, 16, 4)})
    with pytest.raises(CheckpointError, match="deltanet head dims 8, 16"):
        Shard.plan(0, 2, **{**sizes, "hybrid": HybridArgs((1, 0), 8, 2, 2, 8, 16, 4)})


def forwards(runner) -> list[np.ndarray]:
    """A prefill chunk, a mixed round (a continuation and a new sequence's rows), and decode steps;
    on a hybrid, with its state slots: kept in place, copied (a snapshot), resumed from the copy
    into another slot, and given back."""
    runner.allocate_kv(16, 32)
    hybrid = runner.state_bytes() > 0
    if hybrid:
        runner.allocate_state(6)

    def seg(table, start, rows, src=-1, dst=0):
        return runner.segment(table, start, rows, src, [dst] * rows) if hybrid else runner.segment(table, start, rows)
    toks = [(37 * i + 11) % 4000 + 100 for i in range(80)]
    out = [runner.forward(toks[:40], [seg([0, 1], 0, 40)], list(range(40)))]
    out.append(runner.forward(toks[40:45] + toks[:3], [seg([0, 1], 40, 5, 0), seg([5], 0, 3, -1, 1)], [4, 7]))
    if hybrid:
        runner.copy_state(0, 2)
    for i in range(3):
        out.append(runner.forward([toks[50 + i]], [seg([0, 1, 2], 45 + i, 1, 0, 0)], [0]))
    if hybrid:
        out.append(runner.forward([toks[60]], [seg([0, 1, 2], 45, 1, 2, 3)], [0]))
        runner.trim_state([3])
    return out


@pytest.mark.parametrize("name", ["default", "qwen2", "qwen3", "hybrid", "hybrid-gguf"])
def test_two_ranks_give_one_ranks_logits(checkpoints, name):
    runner = NativeRunner(checkpoints[name], threads=1)
    one = forwards(runner)
    two = start_leader(checkpoints[name], EngineConfig(ranks=2, threads=1))
    try:
        assert "2 ranks" in two.describe()
        assert two.runner.kv_bytes_per_token() < runner.kv_bytes_per_token()    # rank 0: its own heads' KV
        assert two.kv_bytes_per_token() == runner.kv_bytes_per_token()         # planned: every rank's
        if name.startswith("hybrid"):                                           # and the same for states
            assert 0 < two.runner.state_bytes() < runner.state_bytes() <= two.state_bytes()
        got = forwards(two)
        assert two.group.bytes_sent > 0
    finally:
        two.close()
    assert [p.returncode for p in two._followers] == [0]          # stopped cleanly, no abort at exit
    for i, (a, b) in enumerate(zip(one, got)):
        assert a.shape == b.shape and np.array_equal(a, b), f"forward {i}: max diff {np.abs(a - b).max()}"


def test_draws_across_ranks_are_one_ranks(checkpoints):
    """Rows drawn by the sharded rule (greedy; candidates; whole shards when the cuts may keep more;
    with each row's rules applied on each rank: forbidden tokens, penalties, logit_bias) give
    sampler.sample's token on one rank's logits with the rules applied."""
    from tensorfold.engine.constraints import ForceToken, LogitAdjust, apply, for_shards
    from tensorfold.engine.sampler import sample
    from tensorfold.engine.types import SamplingParams as SP

    folder = checkpoints["default"]
    vocab = 49152

    def banning(allowed: list[int] | None):
        mask = np.ones(vocab, dtype=bool)
        if allowed:
            mask[allowed] = False
        return [], mask

    adjust = LogitAdjust(bias=((100, 5.0), (30_000, -2.5), (45_000, 7.25)), frequency=0.5, presence=0.3,
                         repetition=1.3, prompt_seen=np.array([3, 200, 26_000, 40_000]))
    reply = [30_001, 30_001, 7, 46_000]
    rules = {"adjust": for_shards([adjust], reply, vocab),
             "adjust+force": for_shards([adjust, ForceToken(len(reply), 45_000)], reply, vocab)}
    draws = [(SP(temperature=0.0), 0, None), (SP(temperature=0.8, top_p=0.9, seed=3), 5, None),
             (SP(temperature=1.0, seed=4), 1, None), None, (SP(temperature=1.5, top_k=20, seed=9), 7, None),
             (SP(temperature=0.7, min_p=0.1, seed=2), 3, None), (SP(temperature=3.0, top_p=0.999, seed=8), 2, None),
             (SP(temperature=0.0), 4, None), (SP(temperature=0.0), 0, banning([5, 20_000, 30_000, 49_000])),
             (SP(temperature=1.2, top_p=0.95, seed=1), 9, banning([5, 20_000, 30_000, 49_000])),
             (SP(temperature=0.9, seed=7), 6, banning([40_000])), (SP(temperature=0.0), 2, banning([40_000])),
             (SP(temperature=0.9, seed=7), 6, banning(None)),
             (SP(temperature=0.0), 4, rules["adjust"]), (SP(temperature=0.9, top_k=50, seed=5), 4, rules["adjust"]),
             (SP(temperature=0.9, seed=5), 4, rules["adjust+force"])]
    toks = [(53 * i + 7) % 3000 + 200 for i in range(len(draws))]

    def run(runner, **kw):
        runner.allocate_kv(4, 32)
        return runner.forward(toks, [runner.segment([0], 0, len(toks))], list(range(len(toks))), **kw)

    per_row = {13: [adjust], 14: [adjust], 15: [adjust, ForceToken(len(reply), 45_000)]}

    def ruled(row: np.ndarray, i: int) -> np.ndarray:
        """A row with its rules applied as one rank applies them."""
        row = row.copy()
        if i in per_row:
            apply(per_row[i], reply, row)
        elif draws[i] is not None and draws[i][2] is not None:
            row[draws[i][2][1]] = -np.inf
        return row

    whole = run(NativeRunner(folder, threads=1))
    two = start_leader(folder, EngineConfig(ranks=2, threads=1))
    try:
        rows, drawn = run(two, draws=draws)
        drawn_bytes = two.last_step[1]
        run(two)                                   # every row's whole logits
        assert two.last_step[1] > drawn_bytes
        with pytest.raises(ValueError, match="no token is allowed"):   # as one rank says it
            rows2, drawn2 = run(two, draws=[draws[12]] * 2 + [None] * (len(toks) - 2))
            sample(ruled(rows2[0], 12), *draws[12][:2])
    finally:
        two.close()
    expected = np.stack([ruled(whole[i], i) for i in range(len(draws))])
    for i, d in enumerate(draws):
        if drawn[i] is None:                      # the logits as the forward gave them
            assert np.array_equal(rows[i], whole[i]), i
        else:
            assert rows[i] is None
        if d is not None and not bool(np.isneginf(expected[i]).all()):
            token = drawn[i] if drawn[i] is not None else sample(ruled(rows[i], i), *d[:2])
            assert token == sample(expected[i], *d[:2]), i
    assert drawn[3] is None and drawn[2] is None              # no plan; top_p 1 without min_p: whole
    assert None not in (drawn[0], drawn[4], drawn[7], drawn[8], drawn[9], drawn[11], drawn[13], drawn[14])
    assert drawn[10] == drawn[11] == 40_000 and drawn[8] in (5, 20_000, 30_000, 49_000) and drawn[15] == 45_000
    assert drawn[13] == int(np.argmax(expected[13]))


def test_refusals(checkpoints, tmp_path, default_model):
    one_kv = make_tiny_checkpoint(tmp_path / "mqa", default_model, kv_heads=1)
    with pytest.raises(CheckpointError, match="1 kv head"):
        start_leader(one_kv, EngineConfig(ranks=2, threads=1))
    from tensorfold.backends.torch.runner import UnsupportedModel
    from tensorfold.engine.async_engine import make_runner

    with pytest.raises(UnsupportedModel, match="--ranks 0"):
        make_runner(checkpoints["qwen3"], EngineConfig(ranks=0))
    with pytest.raises(UnsupportedModel, match="MLX serves on one rank"):
        make_runner(checkpoints["qwen3"], EngineConfig(ranks=2, engine="mlx"))
    with pytest.raises(UnsupportedModel, match="--kv-cache int8 applies to the CPU engine"):
        make_runner(checkpoints["qwen3"], EngineConfig(device="cuda", kv_cache="int8"))
    with pytest.raises(UnsupportedModel, match="--kv-cache and --device apply to the torch engine"):
        make_runner(checkpoints["qwen3"], EngineConfig(engine="mlx", kv_cache="int8"))


# -- faults, through the HTTP server -------------------------------------------------------------------

def serve(engine):
    from tensorfold.api.app import create_app
    from tensorfold.api.server import ServerThread
    from tensorfold.config import ServerConfig

    thread = ServerThread(create_app(engine, ServerConfig(engine=EngineConfig())))
    return thread, thread.start()


LONG = {"messages": [{"role": "user", "content": "Count."}], "max_tokens": 1500, "ignore_eos": True,
        "temperature": 0, "stream": True}


def follower(engine):
    (proc,) = engine.runner._followers
    return proc


def stream_until_fault(url: str, fault) -> list[str]:
    """Stream LONG; after a few chunks call fault(); the events that follow."""
    after: list[str] = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=LONG, timeout=120) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        for _ in range(6):
            next(lines)
        fault()
        after = [line for line in lines if line]
    return after


def assert_down(url: str, after: list[str]) -> None:
    errors = [json.loads(line[6:]) for line in after if line.startswith("data: {") and '"error"' in line]
    assert errors and errors[-1]["error"]["type"] == "server_error", after[-3:]
    assert after[-1] == "data: [DONE]"
    health = httpx.get(url + "/health").json()
    assert health["status"] == "degraded" and "restart" in health["down"]
    r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 503 and r.json()["error"]["code"] == "engine_down"


def test_killed_rank_ends_replies_and_refuses_later_ones(tiny_model):
    with engine_on(tiny_model, ranks=2, threads=1) as engine:
        thread, url = serve(engine)
        try:
            t0 = time.monotonic()
            after = stream_until_fault(url, lambda: follower(engine).kill())
            assert time.monotonic() - t0 < 60
            assert_down(url, after)
            assert "rank 1" in engine.down or "out of step" in engine.down
        finally:
            thread.stop()


def test_hung_rank_times_out(tiny_model, monkeypatch):
    monkeypatch.setattr(launch, "STEP_SECONDS", 3.0)
    with engine_on(tiny_model, ranks=2, threads=1) as engine:
        thread, url = serve(engine)
        proc = follower(engine)
        try:
            t0 = time.monotonic()
            after = stream_until_fault(url, lambda: os.kill(proc.pid, signal.SIGSTOP))
            assert time.monotonic() - t0 < 60
            assert_down(url, after)
            assert "out of step" in engine.down
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            thread.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_under_torchrun(tiny_model):
    """torchrun starts both processes: rank 0 serves, rank 1 follows; replies equal one rank's."""
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
           str(free_port()), "-m", "tensorfold", "--log-level", "WARNING", "serve", "--model", str(tiny_model),
           "--ranks", "2", "--threads", "1", "--port", str(port), "--kv-memory", "0.25"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    body = {"messages": [{"role": "user", "content": "Tell me about ships."}], "max_tokens": 24,
            "temperature": 0.9, "seed": 5}
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()[-3000:]
                time.sleep(0.5)
        assert "2 ranks" in health["engine"]
        two = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=60).json()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    with engine_on(tiny_model, threads=1) as engine:
        thread, url = serve(engine)
        try:
            one = httpx.post(url + "/v1/chat/completions", json=body, timeout=60).json()
        finally:
            thread.stop()
    assert two["choices"][0]["message"]["content"] == one["choices"][0]["message"]["content"]
    assert two["usage"]["completion_tokens"] == one["usage"]["completion_tokens"] == 24
