"""The MLX engine's runner (backends/mlx) against its contract: mlx-lm's models over the
engine's paged KV, each row's logits the same bits however it was batched, chunked or
placed, and close to the fp32 torch reference.  Runs on MLX's CPU backend here (the test
extra installs mlx[cpu] on Linux)."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from tensorfold.backends.mlx.runner import MLXRunner  # noqa: E402
from tensorfold.backends.torch.runner import TorchRunner  # noqa: E402
from tests.tiny import TOKENIZER_FILES, make_tiny_checkpoint  # noqa: E402

BS = 16
PROMPT = 40


@pytest.fixture(scope="module")
def folders(tmp_path_factory, default_model):
    root = tmp_path_factory.mktemp("mlx")
    return {arch: make_tiny_checkpoint(root / arch, default_model, arch=cls)
            for arch, cls in (("llama", "LlamaForCausalLM"), ("qwen2", "Qwen2ForCausalLM"),
                              ("qwen3", "Qwen3ForCausalLM"))}


def runner(folder, threads: int | None = None) -> MLXRunner:
    r = MLXRunner(folder, threads=threads)
    r.allocate_kv(64, BS)
    return r


def prefill(r, tokens, table, chunk=None, start=0) -> torch.Tensor:
    chunk = chunk or len(tokens)
    out = []
    for s in range(0, len(tokens), chunk):
        part = tokens[s:s + chunk]
        out.append(torch.as_tensor(r.forward(part, [r.segment(table, start + s, len(part))], list(range(len(part))))))
    return torch.cat(out)


def assert_same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape, what
    assert torch.equal(got.view(torch.int32), want.view(torch.int32)), what


def tokens_for(seed: int, n: int) -> list[int]:
    return torch.randint(0, 49152, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_logits_match_the_fp32_torch_model(folders, arch):
    tokens = tokens_for(1, PROMPT)
    got = prefill(runner(folders[arch]), tokens, [3, 9, 5])
    ref = TorchRunner(folders[arch], dtype="float32", device="cpu")
    ref.allocate_kv(4, BS)
    want = prefill(ref, tokens, [0, 1, 2])
    # two float32 implementations of the same model: rounding differences only
    assert torch.allclose(got, want, atol=2e-4, rtol=1e-4), (got - want).abs().max()


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_a_rows_bits_do_not_depend_on_its_batch(folders, arch):
    r = runner(folders[arch])
    tokens, other = tokens_for(2, PROMPT), tokens_for(3, 25)
    A, O = [0, 1, 2], [10, 11]
    whole = prefill(r, tokens, A)
    for chunk in (1, 7, 16):
        assert_same(prefill(r, tokens, A, chunk), whole, f"chunks of {chunk}")
    assert_same(prefill(r, tokens, [40, 7, 33]), whole, "other block ids")       # keys gathered by slot
    assert_same(prefill(r, tokens, [5, 6, 20]), whole, "a run of blocks, then another")   # sliced, then gathered
    other_alone = prefill(r, other, O)
    both = torch.as_tensor(r.forward(other + tokens, [r.segment(O, 0, 25), r.segment(A, 0, PROMPT)],
                                     list(range(25 + PROMPT))))
    assert_same(both[25:], whole, "batched after another sequence")
    assert_same(both[:25], other_alone, "the other sequence")
    # decode rows beside another sequence's decode, after a partial prefill
    head = prefill(r, tokens[:20], A)
    prefill(r, other[:5], O)
    rows = [head]
    for p in range(20, PROMPT):
        q = p - 15
        step = torch.as_tensor(r.forward([tokens[p], other[q]], [r.segment(A, p, 1), r.segment(O, q, 1)], [0, 1]))
        rows.append(step[:1])
        assert_same(step[1:], other_alone[q:q + 1], f"the other sequence's decode at {q}")
    assert_same(torch.cat(rows), whole, "prefill 20 then decode")


def mlx_lm_decode(folder, tokens: list[int], weights: str = "auto") -> torch.Tensor:
    """mlx-lm's own model (no split linears) decoding `tokens` one at a time with its own cache."""
    from tensorfold.backends.mlx.load import load_model

    from mlx_lm.models.cache import make_prompt_cache

    model, _ = load_model(folder, weights)
    cache = make_prompt_cache(model)
    return torch.from_numpy(np.stack([np.array(model(mx.array([[t]]), cache=cache)[0, 0].astype(mx.float32))
                                      for t in tokens]))


def quantized_copy(src, out, model_type: str | None = None):
    """`src` as mlx-lm's converter writes a 4-bit mlx-community folder."""
    from mlx_lm.utils import load_model, quantize_model, save_config, save_model

    from tensorfold.backends.mlx.load import model_classes

    model, config = load_model(src, get_model_classes=model_classes)
    model, config = quantize_model(model, {**config, "model_type": model_type or config["model_type"]},
                                   group_size=32, bits=4)
    save_model(out, model)
    save_config(config, out / "config.json")
    for f in TOKENIZER_FILES:
        if (src / f).exists():
            shutil.copy(src / f, out / f)
    return out


def test_a_rows_bits_do_not_depend_on_the_thread_count(folders, hybrid_model, default_model, tmp_path):
    """On the CPU each linear (and the tied logits head) is split by output columns over one
    stream per thread: the bits of one thread (mlx-lm's own model), of 2 and of 3 (uneven
    pieces) are the same, computed on a thread other than the loader's, for dense models with and without biases, the built-in GGUF (a tied
    head), a hybrid, and 4-bit weights kept quantized."""
    from tensorfold.backends.mlx.split import SplitEmbedding, SplitLinear
    from tests.engine.test_hybrid import prefill as prefill_hybrid

    tokens = tokens_for(11, 9)
    cases = [(folders["llama"], "auto"), (folders["qwen2"], "auto"), (default_model, "auto"),
             (hybrid_model, "auto"), (quantized_copy(folders["qwen3"], tmp_path / "q4"), "stored")]
    for folder, weights in cases:
        runs = []
        for threads in (1, 2, 3):
            r = MLXRunner(folder, weights=weights, threads=threads)
            r.allocate_kv(4, BS)
            split = [m for _, m in r.model.named_modules() if isinstance(m, (SplitLinear, SplitEmbedding))]
            assert bool(split) == (threads > 1) and r.describe().startswith(f"mlx cpu x{threads}")
            if r.deltanet:
                r.allocate_state(2)
            run = (lambda: prefill_hybrid(r, tokens, [0], 0)) if r.deltanet else (lambda: prefill(r, tokens, [0]))
            with ThreadPoolExecutor(1) as pool:              # the engine's loop runs forwards on its own thread
                runs.append(pool.submit(run).result())
        assert_same(runs[0], mlx_lm_decode(folder, tokens, weights), f"{folder.name}: mlx-lm's own")
        assert_same(runs[1], runs[0], f"{folder.name}: 2 threads")
        assert_same(runs[2], runs[0], f"{folder.name}: 3 threads")


def test_quantized_mlx_community_folder(folders, tmp_path):
    """A 4-bit folder as mlx-lm's converter writes it loads (kept 4-bit, in float32 on the
    CPU) and gives mlx-lm's own logits; fp16 too."""
    from mlx_lm.utils import load_model, quantize_model, save_config, save_model

    src = folders["llama"]
    tokens = tokens_for(4, 12)
    for name, convert in (("4bit", lambda m, c: quantize_model(m, c, group_size=32, bits=4)),
                          ("fp16", lambda m, c: (m.set_dtype(mx.float16) or m, c))):
        model, config = load_model(src)
        model, config = convert(model, config)
        out = tmp_path / name
        save_model(out, model)
        save_config(config, out / "config.json")
        for f in TOKENIZER_FILES:
            if (src / f).exists():
                shutil.copy(src / f, out / f)
        assert ("quantization" in json.loads((out / "config.json").read_text())) == (name == "4bit")
        got = prefill(runner(out), tokens, [0])
        theirs, _ = load_model(out)
        want = torch.from_numpy(np.array(theirs(mx.array([tokens]))[0].astype(mx.float32)))
        tol = 2e-2 if name == "fp16" else 2e-3    # theirs computes in float16 activations
        assert torch.allclose(got, want, atol=tol * float(want.abs().max())), (name, (got - want).abs().max())


@pytest.mark.parametrize("reader", ["mlx", "gguf"])
def test_default_gguf_model_through_mlx(default_model, monkeypatch, reader):
    """The built-in Q4_1 GGUF: MLX reads its blocks as its own 4-bit layout, kept quantized on
    the CPU, so its logits match the fp32 torch reference's (the same weights' values).
    A GGUF MLX's reader refuses (K-quants) is dequantized by the gguf package: the same logits."""
    if reader == "gguf":
        real_load = mx.load

        def refuse_gguf(path, *args, **kwargs):
            if str(path).endswith(".gguf"):
                raise RuntimeError("[load_gguf] gguf_tensor_to_f16 failed")
            return real_load(path, *args, **kwargs)

        monkeypatch.setattr(mx, "load", refuse_gguf)
    tokens = tokens_for(5, 8)
    got = prefill(runner(default_model), tokens, [0])
    ref = TorchRunner(default_model, dtype="float32", device="cpu")
    ref.allocate_kv(2, BS)
    want = prefill(ref, tokens, [0])
    assert torch.allclose(got, want, atol=2e-3, rtol=1e-4), (got - want).abs().max()
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_bad_rows_are_refused(folders):
    r = runner(folders["llama"])
    with pytest.raises(ValueError, match="vocabulary"):
        r.forward([10**6], [r.segment([0], 0, 1)], [0])
    with pytest.raises(ValueError, match="block"):
        r.forward([1], [r.segment([64], 0, 1)], [0])
    with pytest.raises(ValueError, match="exceed"):
        r.forward([1] * 20, [r.segment([0], 0, 20)], [0])


def test_engine_choice(folders):
    from tensorfold.backends.torch.runner import UnsupportedModel
    from tensorfold.config import EngineConfig
    from tensorfold.engine.async_engine import make_runner, pick_engine

    assert isinstance(make_runner(folders["llama"], EngineConfig(engine="mlx")), MLXRunner)
    assert pick_engine(EngineConfig(engine="torch")) == "torch"
    with pytest.raises(UnsupportedModel, match="torch engine"):
        make_runner(folders["llama"], EngineConfig(engine="mlx", weights="q8_0"))


def test_projected_memory_is_checked_before_prefill(folders, monkeypatch):
    """The pool grows as blocks are first used; a request whose blocks would need more memory
    than the machine has free is refused with a 400 when nothing running could free any,
    and the server goes on serving."""
    import openai

    from tensorfold.backends.mlx import runner as mlx_runner
    from tensorfold.config import EngineConfig, ServerConfig
    from tensorfold.engine.async_engine import AsyncEngine
    from tests.servers import running

    r = runner(folders["llama"])
    block = BS * r.kv_bytes_per_token()
    monkeypatch.setattr(mlx_runner, "host_budget", lambda: 20 * block)
    assert r.kv_shortfall([3]) == 0 and r.kv_shortfall([19]) == 0
    assert r.kv_shortfall([40]) == 21 * block
    prefill(r, tokens_for(6, 20), [0, 1])
    assert r.pool.blocks == 16                   # grown to 16, not beyond what was needed and affordable

    engine = AsyncEngine(folders["llama"], EngineConfig(engine="mlx", kv_memory=0.05, context=1024))
    with running(engine, ServerConfig()) as served:
        client = openai.OpenAI(base_url=served.base_url, api_key="x", max_retries=0)
        ok = client.completions.create(model=served.served_id, prompt="Hello", max_tokens=4)
        assert ok.choices[0].text is not None
        monkeypatch.setattr(mlx_runner, "host_budget", lambda: 0)
        with pytest.raises(openai.BadRequestError, match="not enough memory"):
            client.completions.create(model=served.served_id, prompt="Hello there, " * 40, max_tokens=600)
        monkeypatch.setattr(mlx_runner, "host_budget", lambda: 1 << 40)
        again = client.completions.create(model=served.served_id, prompt="Hello there, " * 40, max_tokens=8)
        assert again.usage.completion_tokens == 8


def test_hybrid_rows_are_mlx_lms_own_and_keep_their_bits(hybrid_model):
    """A Qwen3.5 hybrid through mlx-lm's qwen3_5 model, its deltanet states in the engine's
    slots: each row the bits of mlx-lm's own step-by-step decode, transformers' logits, and
    the same bits in chunks, beside another sequence, through verify rows in scratch slots
    and from a copied slot (the prefix cache's snapshot)."""
    from tests.engine.test_hybrid import assert_like_transformers, transformers_text_logits
    from tests.engine.test_hybrid import prefill as prefill_hybrid

    r = runner(hybrid_model)
    r.allocate_state(8)
    assert r.state_bytes() > 0 and r.kv_layers == 1              # one attention layer of four holds KV
    tokens, other = tokens_for(7, 40), tokens_for(8, 9)
    A, O = [0, 1, 2], [3]
    whole = prefill_hybrid(r, tokens, A, 0)
    theirs = mlx_lm_decode(hybrid_model, tokens)
    assert_same(whole, theirs, "mlx-lm's own decode")
    assert_like_transformers(whole, transformers_text_logits(hybrid_model, tokens))
    for chunk in (1, 7):
        assert_same(prefill_hybrid(r, tokens, [5, 6, 7], 2, chunk), whole, f"chunks of {chunk}")
    alone = prefill_hybrid(r, other, O, 1)
    both = torch.as_tensor(r.forward(other + tokens, [r.segment(O, 0, 9, -1, [1] * 9),
                                                      r.segment(A, 0, 40, -1, [0] * 40)], list(range(49))))
    assert_same(both[9:], whole, "batched after another sequence")
    assert_same(both[:9], alone, "the other sequence")
    head = prefill_hybrid(r, tokens[:30], A, 2)
    rows = torch.as_tensor(r.forward(tokens[30:34], [r.segment(A, 30, 4, 2, [2, 4, 5, 6])], list(range(4))))
    rest = torch.as_tensor(r.forward(tokens[32:], [r.segment(A, 32, 8, 4, [4] * 8)], list(range(8))))  # kept two: slot 4
    assert_same(torch.cat([head, rows[:2], rest]), whole, "verify rows, then on from the last kept one")
    prefill_hybrid(r, tokens[:16], A, 2)
    r.copy_state(2, 7)                                          # a snapshot at the block boundary
    rest = torch.as_tensor(r.forward(tokens[16:], [r.segment(A, 16, 24, 7, [3] * 24)], list(range(24))))
    assert_same(rest, whole[16:], "resumed from a copied slot")
    with pytest.raises(ValueError, match="state slot"):
        r.forward([1, 2], [r.segment([0], 0, 2)], [1])
    with pytest.raises(ValueError, match="state slot"):
        r.forward([1, 2], [r.segment([0], 0, 2, -1, [0, 99])], [1])


def test_hybrid_refusals_on_mlx(hybrid_model, default_model, tmp_path):
    """A qwen35 GGUF runs on the torch engine, and layers placed otherwise than mlx-lm's
    Qwen3.5 places them would build another model: both are refused with a clear error."""
    from tensorfold.checkpoints.errors import CheckpointError
    from tensorfold.checkpoints.files import gguf_file
    from tensorfold.checkpoints.gguf_convert import convert_gguf
    from tests.tiny import write_hybrid_gguf

    gguf = write_hybrid_gguf(hybrid_model, tmp_path / "hybrid.gguf", gguf_file(default_model))
    with pytest.raises(CheckpointError, match="torch engine"):
        MLXRunner(convert_gguf(gguf, tmp_path / "converted"))
    odd = tmp_path / "odd"
    shutil.copytree(hybrid_model, odd)
    config = json.loads((odd / "config.json").read_text())
    config["layer_types"] = ["linear_attention", "full_attention"] * 2
    (odd / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="every 4 layers"):
        MLXRunner(odd)


def test_multimodal_hybrid_folder_serves_text_on_mlx(vision_model):
    """A Qwen3.5 checkpoint with its vision tower (Qwen3_5ForConditionalGeneration, mlx-lm's
    qwen3_5): its language model's logits are transformers' on text."""
    from transformers import Qwen3_5ForConditionalGeneration

    from tests.engine.test_hybrid import assert_like_transformers
    from tests.engine.test_hybrid import prefill as prefill_hybrid

    r = runner(vision_model)
    r.allocate_state(2)
    tokens = tokens_for(9, 24)
    ours = prefill_hybrid(r, tokens, [0, 1], 0)
    ref = Qwen3_5ForConditionalGeneration.from_pretrained(vision_model, dtype=torch.float32).eval()
    with torch.no_grad():
        assert_like_transformers(ours, ref(input_ids=torch.tensor([tokens])).logits[0])


def test_quantized_hybrid_folder(hybrid_model, tmp_path):
    """A 4-bit Qwen3.5 folder as mlx-lm's converter writes it (model_type qwen3_5) loads,
    kept 4-bit in float32 on the CPU, and gives mlx-lm's own logits."""
    from mlx_lm.utils import load_model

    from tests.engine.test_hybrid import prefill as prefill_hybrid

    out = quantized_copy(hybrid_model, tmp_path / "4bit", "qwen3_5")
    assert json.loads((out / "config.json").read_text())["quantization"]["bits"] == 4
    r = runner(out)
    r.allocate_state(2)
    tokens = tokens_for(10, 12)
    got = prefill_hybrid(r, tokens, [0], 0)
    theirs, _ = load_model(out)
    want = torch.from_numpy(np.array(theirs(mx.array([tokens]))[0].astype(mx.float32)))
    assert torch.allclose(got, want, atol=2e-3 * float(want.abs().max())), (got - want).abs().max()
