"""checkpoints/gguf_index against gguf's own reader: the same tensors, bytes and metadata."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, GGUFWriter

from tensorfold.checkpoints.errors import CheckpointError
from tensorfold.checkpoints.files import gguf_file
from tensorfold.checkpoints.gguf_convert import read_metadata
from tensorfold.checkpoints.gguf_index import read_index
from tests.unit.test_quant_pack import random_raw


def assert_same_as_gguf_reader(path) -> None:
    meta, tensors = read_index(path)
    reader = GGUFReader(str(path))
    assert [t.name for t in tensors] == [t.name for t in reader.tensors]
    for mine, theirs in zip(tensors, reader.tensors):
        assert mine.tensor_type == theirs.tensor_type, mine.name
        assert mine.shape == tuple(int(d) for d in theirs.shape), mine.name
        assert mine.data.dtype == theirs.data.dtype and mine.data.shape == theirs.data.shape, mine.name
        assert np.array_equal(mine.data.view(np.uint8), theirs.data.view(np.uint8)), mine.name
    theirs_meta = read_metadata(reader)
    for key, value in meta.items():
        assert key in theirs_meta and theirs_meta[key] == value, key


def test_the_default_model_reads_the_same(default_model):
    path = gguf_file(default_model)
    if path is None:
        pytest.skip("the default model here keeps no GGUF file")
    meta, _ = read_index(path)
    assert meta["general.architecture"] == "llama" and "tokenizer.ggml.tokens" not in meta   # 49,152 skipped
    assert_same_as_gguf_reader(path)


def test_every_tensor_kind_and_long_arrays_read_the_same(tmp_path):
    path = tmp_path / "m.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_uint32("llama.attention.head_count", 4)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_string("general.name", "tiny ünïcode")
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(300)])     # long: stepped over
    w.add_array("tokenizer.ggml.scores", [float(i) for i in range(300)])
    w.add_array("llama.small", [1, 2, 3])
    rng = np.random.default_rng(0)
    w.add_tensor("f32", rng.standard_normal((3, 64)).astype(np.float32))
    w.add_tensor("f16", rng.standard_normal(64).astype(np.float16))
    for qtype in (QT.Q4_K, QT.Q6_K, QT.Q8_0, QT.Q4_1):
        raw = random_raw(qtype, 3, 256, seed=int(qtype))
        w.add_tensor(f"q{int(qtype)}", raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta, tensors = read_index(path)
    assert meta["llama.small"] == [1, 2, 3] and meta["general.name"] == "tiny ünïcode"
    assert "tokenizer.ggml.tokens" not in meta and "tokenizer.ggml.scores" not in meta
    assert {t.name: t.data.shape for t in tensors}["q12"] == (3, 144)     # Q4_K: a row of blocks per output
    assert_same_as_gguf_reader(path)


def test_a_file_that_is_not_gguf_or_is_cut_short_is_refused(tmp_path, default_model):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(CheckpointError, match="not a GGUF file"):
        read_index(bad)
    path = gguf_file(default_model)
    if path is None:
        pytest.skip("the default model here keeps no GGUF file")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="past the end of the file"):
        read_index(cut)
    cut.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="not a readable GGUF file"):
        read_index(cut)
