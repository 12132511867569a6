"""Shared test settings: one torch thread (the other core is often busy)."""

import torch

torch.set_num_threads(1)

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def default_model() -> Path:
    """The real default model's folder (SmolLM2-135M-Instruct), pulled by the set-up."""
    from tensorfold.checkpoints.resolve import resolve_model

    return resolve_model(None)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, default_model) -> Path:
    """A 2-layer random Llama with the default model's tokenizer and chat template."""
    from tests.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-llama"), default_model)


@pytest.fixture(scope="session")
def echo_model(tmp_path_factory, default_model) -> Path:
    """A 2-layer random Llama whose output head is its embedding: it repeats itself."""
    from tests.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-echo"), default_model, tied=True)


@pytest.fixture(scope="session")
def hybrid_model(tmp_path_factory, default_model) -> Path:
    """A 4-layer random Qwen3.5 hybrid (3 Gated DeltaNet layers, then gated attention) with
    the default model's tokenizer and chat template."""
    from tests.tiny import make_tiny_hybrid

    return make_tiny_hybrid(tmp_path_factory.mktemp("tiny-hybrid"), default_model)


@pytest.fixture(scope="session")
def vision_model(tmp_path_factory, default_model) -> Path:
    """The tiny hybrid with a tiny vision tower, Qwen's vision tokens and an image-part template."""
    from tests.tiny import make_tiny_vision

    return make_tiny_vision(tmp_path_factory.mktemp("tiny-vision"), default_model)


@pytest.fixture(scope="session")
def vision_draft_model(tmp_path_factory, vision_model) -> Path:
    """A 2-layer random Llama with the vision model's tokenizer: a draft model for it."""
    from tests.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-vision-draft"), vision_model)
