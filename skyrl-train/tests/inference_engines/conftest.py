"""Fixtures: the tiny random Llama (SmolLM2 tokenizer), loaded once, and a fresh engine per test."""

from __future__ import annotations

import pytest

from skyrl_train.inference_engines import HFInferenceEngine
from skyrl_train.models import load_causal_lm
from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401


@pytest.fixture(scope="session")
def model(tiny_model):  # noqa: F811
    return load_causal_lm(tiny_model).eval()


@pytest.fixture
async def engine(model, tiny_tokenizer):  # noqa: F811
    engine = HFInferenceEngine(model, tiny_tokenizer, max_num_seqs=16, seed=0)
    yield engine
    await engine.teardown()
