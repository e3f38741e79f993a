"""Shared pieces of the distributed tests: the 8-row training batch and the per-tensor closeness check."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
from skyrl_train.testing import tiny_model  # noqa: F401
from skyrl_train.testing.s3 import s3_bucket, s3_server  # noqa: F401
from skyrl_train.training_batch import TrainingInputBatch

ROWS = 8
RTOL = 1e-5


def _make_batch() -> TrainingInputBatch:
    """Prompts of 2..6 random tokens, responses of 1..5, laid out by the trainer's own padding; random advantages
    (the loss mask leaves the first token of every second response out, as an env observation would be)."""
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(1, 1000, (2 + i % 5,), generator=g).tolist() for i in range(ROWS)]
    responses = [torch.randint(1, 1000, (1 + (i * 3) % 5,), generator=g).tolist() for i in range(ROWS)]
    loss_masks = [[int(i % 2 == 0 or t > 0) for t in range(len(r))] for i, r in enumerate(responses)]
    batch = convert_prompts_responses_to_batch_tensors(0, prompts, responses, [0.0] * ROWS, loss_masks)
    batch["advantages"] = torch.randn(batch["response_mask"].shape, generator=g) * batch["response_mask"]
    return batch


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Relative error of the whole tensor ``‖actual − expected‖ / ‖expected‖`` below ``RTOL``.

    Per tensor rather than per element: an element near 0 has a large relative error from float noise alone.
    """
    error = float((actual - expected).norm() / expected.norm().clamp_min(1e-30))
    assert error < RTOL, f"{what}: relative error {error:.2e}"


@pytest.fixture
def make_batch():
    """``make_batch()``: the same 8-row batch every call (see ``_make_batch``)."""
    return _make_batch


@pytest.fixture
def assert_close():
    """``assert_close(actual, expected, what)``: relative error of the whole tensor below 1e-5."""
    return _assert_close
