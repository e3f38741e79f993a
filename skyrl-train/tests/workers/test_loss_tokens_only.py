"""Logprobs where the loss reads them: with a ``token_mask`` (the loss mask) the LM head runs only before those response
tokens, which get the values and gradients of the full computation; every other response token (a tool result in a
multi-turn episode) gets 0."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.models import load_causal_lm
from skyrl_train.workers import forward, response_logprobs

# Loss masks with tool results inside the response (0 between 1s), one row whose response is all tool result.
LOSS_MASK = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


@pytest.fixture
def model(model_path):
    return load_causal_lm(model_path)


@pytest.fixture
def head_rows(monkeypatch) -> list[int]:
    """How many rows each call of the LM head (`head_logprobs`) in `forward` computed."""
    rows: list[int] = []
    real = forward.head_logprobs

    def counting(hidden, *args, **kwargs):
        rows.append(hidden.shape[0])
        return real(hidden, *args, **kwargs)

    monkeypatch.setattr(forward, "head_logprobs", counting)
    return rows


def _outputs(model, batch, pack: bool, token_mask: torch.Tensor | None):
    return response_logprobs(
        model,
        batch["sequences"],
        batch["attention_mask"],
        batch["response_mask"].shape[1],
        0.7,
        with_entropy=True,
        with_top1=True,
        pack=pack,
        token_mask=token_mask,
    )


@pytest.mark.parametrize("pack", [False, True], ids=["padded", "packed"])
def test_values_are_the_full_ones_on_loss_tokens_and_zero_elsewhere(model, batch, head_rows, pack):
    mask = LOSS_MASK * batch["response_mask"]
    with torch.no_grad():
        full = _outputs(model, batch, pack, None)
        assert head_rows == [int(batch["response_mask"].sum())]
        masked = _outputs(model, batch, pack, mask)
    assert head_rows[1] == int(mask.sum()) < head_rows[0]  # the head ran before loss tokens only
    for got, want in zip(masked, full, strict=True):
        torch.testing.assert_close(got, want * mask, atol=1e-6, rtol=1e-6)
    assert bool((masked[0] != 0).eq(mask.bool()).all())


@pytest.mark.parametrize("pack", [False, True], ids=["padded", "packed"])
def test_the_gradient_of_a_loss_mask_weighted_loss_is_the_full_computations(model, batch, pack):
    mask = LOSS_MASK * batch["response_mask"]
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1))
    gradients = []
    for token_mask in (None, mask):
        model.zero_grad()
        logprobs, entropy, _ = _outputs(model, batch, pack, token_mask)
        ((logprobs + entropy) * weights * mask).sum().backward()
        gradients.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(gradients[1], gradients[0], atol=1e-6, rtol=1e-5)


def test_a_row_without_loss_tokens_still_backpropagates(model, batch):
    """Nothing of the micro-batch is wanted: the forward's graph still reaches the weights (an FSDP2 rank's backward
    must run when the others' do), with a zero gradient."""
    logprobs, _ = response_logprobs(
        model, batch["sequences"], batch["attention_mask"], 4, token_mask=torch.zeros_like(LOSS_MASK)
    )
    assert bool((logprobs == 0).all()) and logprobs.requires_grad
    logprobs.sum().backward()
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters() if p.requires_grad)


def test_worker_logprobs_are_zero_outside_the_loss_mask(build_policy, batch):
    worker = build_policy(lora_rank=4, sample_packing=True)
    full = worker.compute_logprobs(batch, micro_batch_size=2)
    batch["loss_mask"] = LOSS_MASK * batch["response_mask"]
    masked = worker.compute_logprobs(batch, micro_batch_size=2)
    torch.testing.assert_close(masked, full * batch["loss_mask"], atol=1e-6, rtol=1e-6)
