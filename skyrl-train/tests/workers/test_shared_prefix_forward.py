"""Response logprobs of rows sharing a prompt prefix: the prefix runs once, results and gradients are unchanged."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.models import load_causal_lm
from skyrl_train.workers import response_logprobs
from skyrl_train.workers.forward import shared_prefix_length

SHARED = 40


@pytest.fixture
def model(model_path):
    return load_causal_lm(model_path)


@pytest.fixture
def forward_calls(model):
    calls = []
    handle = model.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True
    )
    yield calls
    handle.remove()


def shared_prefix_batch(make_batch, prompt_lengths=(45, 50, 42, 48), response_lengths=(4, 2, 3, 1)):
    """`make_batch` rows whose prompts all start with the same SHARED tokens (after their left padding)."""
    batch = make_batch(prompt_lengths, response_lengths)
    prefix = torch.arange(7, 7 + SHARED)
    for i, length in enumerate(prompt_lengths):
        start = max(prompt_lengths) - length
        batch["sequences"][i, start : start + SHARED] = prefix
    return batch


def plain_logprobs(model, batch) -> torch.Tensor:
    args = (model, batch["sequences"], batch["attention_mask"], batch["response_mask"].shape[1])
    return response_logprobs(*args, share_prefix=False)[0]


def test_shared_prefix_length_counts_the_common_real_tokens_before_the_end_column():
    seqs = torch.tensor([[0, 5, 6, 7, 8, 1], [5, 6, 7, 9, 2, 3]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    assert shared_prefix_length(seqs, mask, end=6) == 3  # 5 6 7, then 8 != 9
    assert shared_prefix_length(seqs, mask, end=3) == 2  # row 0's third token is at column 3: not before the end
    assert shared_prefix_length(seqs, mask, end=1) == 0
    assert shared_prefix_length(torch.tensor([[1, 2], [3, 2]]), torch.ones(2, 2), end=2) == 0
    assert shared_prefix_length(seqs, torch.tensor([[0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]]), end=6) == 0


def test_logprobs_equal_the_plain_forward_and_the_prefix_runs_once(model, make_batch, forward_calls):
    batch = shared_prefix_batch(make_batch)
    with torch.no_grad():
        shared = response_logprobs(model, batch["sequences"], batch["attention_mask"], batch["response_mask"].shape[1])[
            0
        ]
        assert [tuple(shape) for shape in forward_calls] == [(1, SHARED), (4, 50 - SHARED + 4)]
        plain = plain_logprobs(model, batch)
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=0)
    assert bool((shared != 0).any())


def test_gradients_equal_the_plain_forward(model, make_batch):
    batch = shared_prefix_batch(make_batch)
    weights = torch.randn(batch["response_mask"].shape, generator=torch.Generator().manual_seed(1))

    def gradients(logprobs: torch.Tensor) -> dict[str, torch.Tensor]:
        model.zero_grad()
        (logprobs * weights).sum().backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    shared = gradients(response_logprobs(model, batch["sequences"], batch["attention_mask"], weights.shape[1])[0])
    plain = gradients(plain_logprobs(model, batch))
    assert shared.keys() == plain.keys() and len(plain) > 0
    for name in plain:
        torch.testing.assert_close(shared[name], plain[name], atol=1e-5, rtol=1e-4, msg=name)


def test_identical_prompts_keep_their_last_prompt_token_out_of_the_shared_prefix(model, make_batch, forward_calls):
    # The n samples of one GRPO prompt: the whole prompt is shared, the responses differ.
    batch = shared_prefix_batch(make_batch, prompt_lengths=(SHARED,) * 3, response_lengths=(3, 5, 2))
    with torch.no_grad():
        shared = response_logprobs(model, batch["sequences"], batch["attention_mask"], 5)[0]
        assert tuple(forward_calls[0]) == (1, SHARED - 1)
        torch.testing.assert_close(shared, plain_logprobs(model, batch), atol=1e-5, rtol=0)


def test_with_activation_checkpointing_rows_run_whole(model, make_batch, forward_calls):
    model.activation_checkpointing_enable()
    model.train()  # layers checkpoint only in training mode
    batch = shared_prefix_batch(make_batch)
    response_logprobs(model, batch["sequences"], batch["attention_mask"], batch["response_mask"].shape[1])
    assert [tuple(shape) for shape in forward_calls] == [(4, 54)]
