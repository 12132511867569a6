"""The Qwen3.5 hybrids on the CPU engine: logits against transformers' own
implementation, and the deltanet state's bits however the positions run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tensorfold.native import lib
from tests.engine.test_native_kernels import assert_batched_both_orders, assert_same, poison_kv, use_threads

PROMPT = 70
BS = 16


@pytest.fixture(scope="module")
def runner(hybrid_model):
    from tensorfold.native.runner import NativeRunner

    r = NativeRunner(hybrid_model, weights="bf16", threads=1)
    r.allocate_kv(32, BS)
    r.allocate_state(8)
    return r


def poison_state(r) -> None:
    """Every slot NaN: a row that reads a slot nobody wrote shows in its logits."""
    s = r.model._state
    s.seek(0)
    s.write(b"\xff" * len(s))


def prefill(r, tokens, table, slot, chunk: int | None = None) -> torch.Tensor:
    """Positions 0.. of one sequence in chunks, its state updated in place in `slot`."""
    chunk = chunk or len(tokens)
    out = []
    for s in range(0, len(tokens), chunk):
        part = tokens[s:s + chunk]
        seg = r.segment(table, s, len(part), -1 if s == 0 else slot, [slot] * len(part))
        out.append(torch.as_tensor(r.forward(part, [seg], list(range(len(part))))))
    return torch.cat(out)


def assert_like_transformers(ours: torch.Tensor, want: torch.Tensor) -> None:
    """Our fp32 arithmetic against transformers' fp32 reference on bf16-exact weights: within
    a few ulps of the logits' scale (its chunked delta rule sums in another order), same argmax."""
    assert (ours - want).abs().max().item() < 2e-3 * want.abs().max().item()
    assert torch.equal(ours.argmax(-1), want.argmax(-1))


def transformers_text_logits(folder, tokens: list[int]) -> torch.Tensor:
    """transformers' own Qwen3.5 forward of `tokens` on the checkpoint's weights, in fp32."""
    from transformers import Qwen3_5ForCausalLM

    ref = Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return ref(torch.tensor([tokens])).logits[0]


def transformers_image_logits(folder, enc, rgb, tokens: list[int]) -> torch.Tensor:
    """transformers' multimodal forward of `tokens` with the picture `rgb` (processed by our
    encoder's processor) at its pad tokens."""
    from transformers import Qwen3_5ForConditionalGeneration

    ref = Qwen3_5ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    batch = enc.processor(images=[rgb], return_tensors="pt")
    with torch.no_grad():
        return ref(input_ids=torch.tensor([tokens]), pixel_values=batch["pixel_values"].float(),
                   image_grid_thw=batch["image_grid_thw"],
                   mm_token_type_ids=torch.tensor([[int(t == enc.image_token_id) for t in tokens]])).logits[0]


def test_logits_match_transformers(hybrid_model, runner):
    """bf16-exact weights kept as bf16: our fp32 arithmetic against transformers' fp32
    reference (its chunked delta rule sums in another order; the bound is a few ulps of
    the logits' scale, far below any weight-format error)."""
    tokens = np.random.default_rng(1).integers(0, runner.vocab_size, 40).tolist()
    poison_kv(runner)
    poison_state(runner)
    ours = prefill(runner, tokens, [0, 1, 2], 0)
    want = transformers_text_logits(hybrid_model, tokens)
    assert_like_transformers(ours, want)


def test_state_bits_the_same_however_run(runner):
    r = runner
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, r.vocab_size, PROMPT).tolist()
    other = rng.integers(0, r.vocab_size, 45).tolist()
    A, O = [0, 1, 2, 3, 4], [5, 6, 7]
    poison_kv(r)
    poison_state(r)
    whole = prefill(r, tokens, A, 0)
    assert torch.isfinite(whole).all()
    other_alone = prefill(r, other, O, 1)

    for chunk in (1, 7, 16, 33):
        poison_state(r)
        assert_same(prefill(r, tokens, A, 3, chunk), whole, f"chunks of {chunk}")

    # batched with an unrelated sequence, in both orders
    segs = [r.segment(A, 0, PROMPT, -1, [0] * PROMPT), r.segment(O, 0, len(other), -1, [1] * len(other))]
    assert_batched_both_orders(r, tokens, other, segs, whole, other_alone, lambda: poison_state(r))

    # verify rows: each row's state in its own slot; resume from the slot of a kept row
    poison_state(r)
    head = prefill(r, tokens[:40], A, 2)
    rows = torch.as_tensor(r.forward(tokens[40:45], [r.segment(A, 40, 5, 2, [2, 4, 5, 6, 7])], list(range(5))))
    assert_same(torch.cat([head, rows]), whole[:45], "verify rows in scratch slots")
    # keep three of the five rows (state in slot 5), then go on from there
    rest = torch.as_tensor(r.forward(tokens[43:], [r.segment(A, 43, PROMPT - 43, 5, [5] * (PROMPT - 43))],
                                     list(range(PROMPT - 43))))
    assert_same(rest, whole[43:], "resumed from the slot after the last kept row")

    # decode one row at a time, batched with the other sequence's decode
    poison_state(r)
    head = prefill(r, tokens[:40], A, 0)
    prefill(r, other[:15], O, 1)
    out = [head]
    for p in range(40, PROMPT):
        q = p - 25
        step = torch.as_tensor(r.forward([tokens[p], other[q]], [r.segment(A, p, 1, 0, [0]), r.segment(O, q, 1, 1, [1])],
                                         [0, 1]))
        out.append(step[:1])
        assert_same(step[1:], other_alone[q:q + 1], f"the other sequence's decode at {q}")
    assert_same(torch.cat(out), whole, "prefill 40 then decode")

    use_threads(3)
    for n in (2, 3):
        r.model.struct.threads = n
        assert_same(prefill(r, tokens, A, 0), whole, f"{n} threads")
        assert_same(prefill(r, tokens, A, 0, 7), whole, f"{n} threads, chunks of 7")
    r.model.struct.threads = 1
    for isa in range(lib.load().tf_best_isa() + 1):
        if isa != 3:
            assert lib.load().tf_set_isa(isa) == isa
            assert_same(prefill(r, tokens, A, 0), whole, f"ISA {isa}")
    lib.load().tf_set_isa(-1)


def test_segments_name_their_state_slots(runner):
    r = runner
    with pytest.raises(ValueError, match="state slot"):
        r.forward([1, 2], [r.segment([0], 0, 2)], [1])                       # no slots
    with pytest.raises(ValueError, match="state slot"):
        r.forward([1, 2], [r.segment([0], 3, 2, -1, [0, 0])], [1])           # no source past position 0
    with pytest.raises(ValueError, match="state slot"):
        r.forward([1, 2], [r.segment([0], 0, 2, -1, [0, 99])], [1])          # outside the pool


def test_gguf_in_llama_cpp_layout_matches_transformers(hybrid_model, default_model, tmp_path, monkeypatch):
    """A qwen35 GGUF as llama.cpp writes it (tiled value heads, 1 + weight norms, -exp(A_log)):
    converted to a folder and loaded, its logits are transformers' on the same weights.
    F32 tensors of bf16-exact values load as bf16 (not the default q8_0), so the bound is the
    one of test_logits_match_transformers."""
    from tensorfold.checkpoints.files import gguf_file
    from tensorfold.checkpoints.gguf_convert import convert_gguf
    from tensorfold.native import quant
    from tensorfold.native.runner import NativeRunner
    from tests.tiny import write_hybrid_gguf

    path = write_hybrid_gguf(hybrid_model, tmp_path / "hybrid.gguf", gguf_file(default_model))
    folder = convert_gguf(path, tmp_path / "converted")
    monkeypatch.setattr(quant, "DEFAULT_FLOAT_KIND", "bf16")
    r = NativeRunner(folder, threads=1)
    assert r.weights == "gguf" and r.model.struct.dn.tiled
    r.allocate_kv(8, BS)
    r.allocate_state(2)
    tokens = np.random.default_rng(1).integers(0, r.vocab_size, 40).tolist()
    ours = prefill(r, tokens, [0, 1, 2], 0)
    want = transformers_text_logits(hybrid_model, tokens)
    assert_like_transformers(ours, want)


def test_an_images_rows_match_transformers_and_chunk_freely(vision_model):
    """The image's embeddings at its pad positions and M-RoPE's (t, h, w) positions (the text
    after the image sits lower): logits as transformers' multimodal forward gives them, and
    the same bits however the prompt is chunked through the image."""
    from types import SimpleNamespace

    from PIL import Image as PILImage
    from tensorfold.native.runner import NativeRunner
    from tensorfold.vision.encoder import VisionEncoder
    from tensorfold.vision.positions import Placed

    enc = VisionEncoder.from_folder(vision_model)
    rgb = PILImage.fromarray((np.random.default_rng(0).random((70, 100, 3)) * 255).astype(np.uint8))
    image = enc.encode(SimpleNamespace(rgb=rgb, digest="a picture"))
    assert image.grid == (1, 2, 3) and image.embeds.shape == (6, 64)
    pre, post = [10, 20, 30, enc.start_token_id], [enc.end_token_id, 40, 50, 60, 70]
    tokens = pre + [enc.image_token_id] * image.tokens + post
    r = NativeRunner(vision_model, weights="bf16", threads=1)
    r.allocate_kv(8, BS)
    r.allocate_state(2)
    T, placed = len(tokens), (Placed(len(pre), image),)
    ours = torch.as_tensor(r.forward(tokens, [r.segment([0, 1], 0, T, -1, [0] * T, images=placed)], list(range(T))))
    want = transformers_image_logits(vision_model, enc, rgb, tokens)
    assert_like_transformers(ours, want)
    for chunk in (1, 5):
        parts = []
        for s in range(0, T, chunk):
            n = min(chunk, T - s)
            seg = r.segment([0, 1], s, n, -1 if s == 0 else 1, [1] * n, images=placed)
            parts.append(torch.as_tensor(r.forward(tokens[s:s + n], [seg], list(range(n)))))
        assert_same(torch.cat(parts), ours, f"chunks of {chunk}")
    assert enc.encode(SimpleNamespace(rgb=None, digest="a picture")) is image     # cached by digest


def test_torch_model_matches_transformers_and_keeps_its_bits(hybrid_model):
    """The torch engine's hybrid (backends/torch/models/qwen3_5.py; CUDA in service, the CPU
    here): transformers' logits, and the same bits in chunks, beside another sequence and
    through verify rows in scratch slots."""
    from tensorfold.backends.torch.runner import TorchRunner

    r = TorchRunner(hybrid_model, dtype="float32", device="cpu")
    r.allocate_kv(16, BS)
    r.allocate_state(8)
    rng = np.random.default_rng(4)
    tokens, other = rng.integers(0, r.vocab_size, 40).tolist(), rng.integers(0, r.vocab_size, 9).tolist()
    A, O = [0, 1, 2], [3]
    whole = prefill(r, tokens, A, 0)
    want = transformers_text_logits(hybrid_model, tokens)
    assert_like_transformers(whole, want)
    for chunk in (1, 7):
        assert_same(prefill(r, tokens, A, 2, chunk), whole, f"chunks of {chunk}")
    alone = prefill(r, other, O, 1)
    both = torch.as_tensor(r.forward(tokens + other, [r.segment(A, 0, 40, -1, [0] * 40),
                                                      r.segment(O, 0, 9, -1, [1] * 9)], list(range(49))))
    assert_same(both[:40], whole, "batched")
    assert_same(both[40:], alone, "the other sequence")
    head = prefill(r, tokens[:30], A, 2)
    rows = torch.as_tensor(r.forward(tokens[30:34], [r.segment(A, 30, 4, 2, [2, 4, 5, 6])], list(range(4))))
    rest = torch.as_tensor(r.forward(tokens[32:], [r.segment(A, 32, 8, 4, [4] * 8)], list(range(8))))  # kept two: slot 4
    assert_same(torch.cat([head, rows[:2], rest]), whole, "verify rows, then on from the last kept one")


def test_gguf_with_mmproj_takes_images_as_transformers_does(vision_model, default_model, tmp_path, monkeypatch):
    """The text as a qwen35 GGUF and the tower as an mmproj GGUF, both in llama.cpp's layout:
    an image's logits are transformers' (bf16-exact weights kept exact, as above)."""
    from PIL import Image as PILImage

    from tensorfold.checkpoints.files import gguf_file
    from tensorfold.checkpoints.gguf_convert import convert_gguf
    from tensorfold.checkpoints.tokenizer import Tokenizer
    from tensorfold.native import quant
    from tensorfold.native.runner import NativeRunner
    from tensorfold.vision.encoder import VisionEncoder
    from tensorfold.vision.positions import Placed
    from tensorfold.vision.source import load_image
    from tests.tiny import write_hybrid_gguf, write_mmproj

    text = write_hybrid_gguf(vision_model, tmp_path / "text.gguf", gguf_file(default_model))
    folder = convert_gguf(text, tmp_path / "converted")
    for name in ("tokenizer.json", "tokenizer_config.json"):          # the vision tokens (the test GGUF
        (folder / name).write_bytes((vision_model / name).read_bytes())   # copies the default model's tokenizer)
    enc = VisionEncoder.from_mmproj(write_mmproj(vision_model, tmp_path / "mmproj.gguf"), Tokenizer(folder).hf)
    monkeypatch.setattr(quant, "DEFAULT_FLOAT_KIND", "bf16")
    r = NativeRunner(folder, threads=1)
    r.allocate_kv(16, BS)
    r.allocate_state(2)
    rgb = PILImage.fromarray((np.random.default_rng(0).random((70, 100, 3)) * 255).astype(np.uint8))
    buf = __import__("io").BytesIO()
    rgb.save(buf, format="PNG")
    image = enc.encode(load_image("data:image/png;base64," + __import__("base64").b64encode(buf.getvalue()).decode()))
    tokens = [10, 20, enc.start_token_id] + [enc.image_token_id] * image.tokens + [enc.end_token_id, 40, 50]
    T = len(tokens)
    ours = torch.as_tensor(r.forward(tokens, [r.segment(list(range(16)), 0, T, -1, [0] * T,
                                                        images=(Placed(3, image),))], list(range(T))))
    want = transformers_image_logits(vision_model, enc, rgb, tokens)
    assert image.grid == (1, 7, 10)        # Qwen3.5's processor: 100x70 grows past 65536 pixels (320x224)
    assert_like_transformers(ours, want)


def test_a_hybrid_draft_model_goes_on_from_the_state_of_the_last_kept_position(hybrid_model):
    """A hybrid drafting: after its guesses are cut short (rejected) or taken, its next
    proposal is the one a fresh drafter makes from the same tokens, whatever it fed before."""
    from tensorfold.engine.drafting.model import DraftModelDrafter
    from tensorfold.engine.types import SamplingParams
    from tensorfold.native.runner import NativeRunner

    def drafter():
        return DraftModelDrafter(NativeRunner(hybrid_model, threads=1), 32, BS, prefill_chunk=7, lanes=2)

    sampling = SamplingParams(temperature=0.0)
    rng = np.random.default_rng(8)
    prompt = rng.integers(0, 49152, 30).tolist()
    d = drafter()
    d.start("s", prompt, sampling)
    tokens = list(prompt)
    for step in range(6):
        guesses = d.propose("s", tokens, 4)
        assert len(guesses) == 4
        fresh = drafter()
        fresh.start("s", prompt, sampling)
        assert fresh.propose("s", tokens, 4) == guesses, f"step {step}"
        kept = guesses[:step % 3]               # some taken, the rest rejected, then another token
        tokens += kept + [int(rng.integers(0, 49152))]
    d.finish("s")
    assert d.states.available == d.states.slots


def test_an_mmproj_beside_a_gguf_is_found(tmp_path):
    from tensorfold.vision.encoder import mmproj_beside

    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "Qwen3.5-Q4_K_M.gguf").write_bytes(b"")
    folder = tmp_path / "converted"
    folder.mkdir()
    (folder / "model.gguf").symlink_to(tmp_path / "repo" / "Qwen3.5-Q4_K_M.gguf")
    assert mmproj_beside(folder) is None
    (tmp_path / "repo" / "mmproj-F16.gguf").write_bytes(b"")
    assert mmproj_beside(folder) == (tmp_path / "repo" / "mmproj-F16.gguf").resolve()
    (tmp_path / "repo" / "mmproj-BF16.gguf").write_bytes(b"")
    assert mmproj_beside(folder) is None                       # two: the user picks with --mmproj


def test_image_embeddings_are_cached_within_a_byte_budget(vision_model, monkeypatch):
    from types import SimpleNamespace

    from PIL import Image as PILImage

    from tensorfold.vision import encoder as E

    enc = E.VisionEncoder.from_folder(vision_model)
    pictures = [SimpleNamespace(rgb=PILImage.new("RGB", (64, 64), (i, 0, 0)), digest=f"p{i}") for i in range(4)]
    first = enc.encode(pictures[0])
    monkeypatch.setattr(E, "CACHE_BYTES", 2 * first.embeds.nbytes)       # room for two of these
    for p in pictures[1:]:
        enc.encode(p)
    assert list(enc._cache) == ["p2", "p3"]
    assert enc.encode(pictures[3]) is enc._cache["p3"]                    # a hit: the same object
    again = enc.encode(pictures[0])                                       # gone: encoded again, same bits
    assert again is not first and np.array_equal(again.embeds, first.embeds)
