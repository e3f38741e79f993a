"""Fixtures: the tiny random Llama (SmolLM2 tokenizer), loaded once per device, and a fresh engine per test; the same
model with a trained LoRA adapter for the prefix-cache tests. Device-parameterised tests run on `available_devices()`
(the CPU, plus CUDA where a GPU is visible)."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config.schema import LoraConfig
from skyrl_train.inference_engines import HFInferenceEngine
from skyrl_train.inference_engines.hf.batcher import model_device
from skyrl_train.models import load_causal_lm
from skyrl_train.models.lora import apply_lora
from skyrl_train.testing import device_params, randomize_lora_b, tiny_model, tiny_tokenizer  # noqa: F401

MODEL_KINDS = ["base", "trained_lora"]
"""`base`: the tiny model; `trained_lora`: it with a LoRA adapter on every linear layer whose B matrices are
non-zero (as after training), so the adapter really changes the keys and values the engine caches."""


def build_model(tiny_model: str, kind: str, device: str = "cpu", dtype: torch.dtype = torch.float32):  # noqa: F811
    """A fresh eval-mode model of the given `MODEL_KINDS` kind on `device`; the same weights on every device."""
    model = load_causal_lm(tiny_model, dtype=dtype, device=device)
    if kind == "trained_lora":
        model = apply_lora(model, LoraConfig(rank=4), task_type="CAUSAL_LM")
        randomize_lora_b(model)
    return model.eval()


def model_input(model, token_ids: list[int]) -> torch.Tensor:
    """[1, len(token_ids)] input ids on `model`'s device."""
    return torch.tensor([token_ids], device=model_device(model))


@pytest.fixture(scope="session")
def models(tiny_model):  # noqa: F811
    """``models(kind, device)``: the session's eval-mode model of that kind on that device, built once. Shared:
    tests must leave its weights as they found them."""
    built = {}

    def get(kind: str = "base", device: str = "cpu"):
        if (kind, device) not in built:
            built[kind, device] = build_model(tiny_model, kind, device)
        return built[kind, device]

    return get


@pytest.fixture(scope="session")
def model(models):
    return models("base", "cpu")


@pytest.fixture
async def engine(model, tiny_tokenizer):  # noqa: F811
    engine = HFInferenceEngine(model, tiny_tokenizer, max_num_seqs=16, seed=0)
    yield engine
    await engine.teardown()


@pytest.fixture
async def engine_on(models, tiny_tokenizer):  # noqa: F811
    """``engine_on(device, kind="base", **kwargs)``: an engine over ``models(kind, device)`` (max_num_seqs 16, seed 0
    unless given), torn down after the test."""
    engines = []

    def make(device: str, kind: str = "base", **kwargs):
        engine = HFInferenceEngine(models(kind, device), tiny_tokenizer, **{"max_num_seqs": 16, "seed": 0, **kwargs})
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.teardown()


@pytest.fixture(
    scope="session",
    params=[
        pytest.param((kind, device.values[0]), marks=device.marks) for device in device_params() for kind in MODEL_KINDS
    ],
    ids=lambda param: "-".join(param),
)
def any_model(request, models):
    """The tiny model, and again with a trained LoRA adapter, on every available device."""
    return models(*request.param)


@pytest.fixture
async def any_engine(any_model, tiny_tokenizer):  # noqa: F811
    engine = HFInferenceEngine(any_model, tiny_tokenizer, max_num_seqs=16, seed=0)
    yield engine
    await engine.teardown()
