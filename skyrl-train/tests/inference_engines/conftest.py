"""Fixtures: the tiny random Llama (SmolLM2 tokenizer), loaded once, and a fresh engine per test; the same model
with a trained LoRA adapter for the prefix-cache tests."""

from __future__ import annotations

import pytest

from skyrl_train.config.schema import LoraConfig
from skyrl_train.inference_engines import HFInferenceEngine
from skyrl_train.models import load_causal_lm
from skyrl_train.testing import randomize_lora_b, tiny_model, tiny_tokenizer  # noqa: F401
from skyrl_train.workers.trainable import apply_lora

MODEL_KINDS = ["base", "trained_lora"]
"""`base`: the tiny model; `trained_lora`: it with a LoRA adapter on every linear layer whose B matrices are
non-zero (as after training), so the adapter really changes the keys and values the engine caches."""


def build_model(tiny_model: str, kind: str):  # noqa: F811
    """A fresh eval-mode model of the given `MODEL_KINDS` kind."""
    model = load_causal_lm(tiny_model)
    if kind == "trained_lora":
        model = apply_lora(model, LoraConfig(rank=4), task_type="CAUSAL_LM")
        randomize_lora_b(model)
    return model.eval()


@pytest.fixture(scope="session")
def model(tiny_model):  # noqa: F811
    return load_causal_lm(tiny_model).eval()


@pytest.fixture
async def engine(model, tiny_tokenizer):  # noqa: F811
    engine = HFInferenceEngine(model, tiny_tokenizer, max_num_seqs=16, seed=0)
    yield engine
    await engine.teardown()


@pytest.fixture(scope="session", params=MODEL_KINDS)
def any_model(request, tiny_model):  # noqa: F811
    """The tiny model, and again with a trained LoRA adapter (each loaded once)."""
    return build_model(tiny_model, request.param)


@pytest.fixture
async def any_engine(any_model, tiny_tokenizer):  # noqa: F811
    engine = HFInferenceEngine(any_model, tiny_tokenizer, max_num_seqs=16, seed=0)
    yield engine
    await engine.teardown()
