"""Fixtures: the tiny random Llama (SmolLM2 tokenizer and chat template), a fresh engine per test, the app over it
through httpx's ASGI transport (protocol tests), and the same app behind a real socket (client and SDK tests)."""

from __future__ import annotations

import httpx
import pytest

from skyrl_train.inference_engines import HFInferenceEngine
from skyrl_train.models import load_causal_lm
from skyrl_train.serve import BackgroundServer, create_app
from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401

MODEL_NAME = "tiny"
CONTEXT = 8192
"""The tiny model's context length (SmolLM2's)."""


@pytest.fixture(scope="session")
def model(tiny_model):  # noqa: F811
    return load_causal_lm(tiny_model).eval()


@pytest.fixture
async def engine(model, tiny_tokenizer):  # noqa: F811
    engine = HFInferenceEngine(model, tiny_tokenizer, max_num_seqs=8, seed=0)
    yield engine
    await engine.teardown()


@pytest.fixture
def app(engine, tiny_tokenizer):  # noqa: F811
    return create_app(engine, tiny_tokenizer, served_model_name=MODEL_NAME, max_model_len=CONTEXT)


@pytest.fixture
async def client(app):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        yield client


@pytest.fixture
def server(app):
    with BackgroundServer(app, "127.0.0.1", 0) as server:
        yield server


def stop_string_at(tokenizer, token_ids: list[int]) -> tuple[int, str]:
    """(k, stop): a stop string that first appears with generated token k, so a generation of `token_ids` given
    that stop string ends after k + 1 tokens."""
    for k in range(1, len(token_ids)):
        stop = tokenizer.decode(token_ids[k : k + 1]).strip()
        if stop and stop not in tokenizer.decode(token_ids[: k + 1])[: -len(stop)]:
            return k, stop
    raise AssertionError(f"no usable stop string in {token_ids}")
