"""Sample packing: the rows of a micro-batch run as one packed row without padding, with the padded forward's results
(logprobs, entropy, gradients), with and without a shared prefix, with and without activation checkpointing; only real
tokens go through the model."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.models import load_causal_lm
from skyrl_train.workers import response_logprobs
from skyrl_train.workers.packing import pack_rows
from skyrl_train.workers.trainable import enable_gradient_checkpointing

SHARED = 40
CHECKPOINTING = ["non_reentrant", "reentrant"]
"""``trainer.gradient_checkpointing_use_reentrant`` false (the default recipe's) and true."""


@pytest.fixture(scope="module")
def model(model_path):
    return load_causal_lm(model_path)


def with_shared_prefix(batch, prompt_lengths):
    """`batch` whose prompts all start with the same SHARED tokens (after their left padding)."""
    for i, length in enumerate(prompt_lengths):
        start = max(prompt_lengths) - length
        batch["sequences"][i, start : start + SHARED] = torch.arange(7, 7 + SHARED)
    return batch


BATCHES = {
    "no_shared_prefix": ((3, 5, 2, 4), (4, 2, 3, 1), False),
    "shared_prefix": ((45, 50, 42, 48), (4, 2, 3, 1), True),
    "a_row_without_response": ((45, 50, 42, 48), (4, 0, 3, 1), True),
}


@pytest.fixture(params=list(BATCHES))
def any_batch(request, make_batch):
    prompts, responses, shared = BATCHES[request.param]
    batch = make_batch(prompts, responses)
    return with_shared_prefix(batch, prompts) if shared else batch


def logprobs_and_entropy(model, batch, pack, temperature=1.0):
    return response_logprobs(
        model,
        batch["sequences"],
        batch["attention_mask"],
        batch["response_mask"].shape[1],
        temperature,
        with_entropy=True,
        pack=pack,
    )


def test_pack_rows_keeps_each_rows_real_tokens_after_the_shared_prefix_with_their_positions():
    seqs = torch.tensor([[0, 0, 5, 6, 7, 8], [5, 6, 9, 3, 4, 0], [0, 5, 6, 2, 0, 0]])
    mask = (seqs != 0).long()
    packed = pack_rows(seqs, mask, shared=2)
    assert packed.input_ids.tolist() == [[7, 8, 9, 3, 4, 2]]
    assert packed.position_ids.tolist() == [[2, 3, 2, 3, 4, 2]]
    assert packed.segments == [(0, 2), (2, 5), (5, 6)]
    unshared = pack_rows(seqs, mask, shared=0)
    assert unshared.input_ids.tolist() == [[5, 6, 7, 8, 5, 6, 9, 3, 4, 5, 6, 2]]
    assert unshared.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3, 4, 0, 1, 2]]
    assert unshared.segments == [(0, 4), (4, 9), (9, 12)]


def test_pack_rows_refuses_a_row_with_padding_between_real_tokens():
    seqs = torch.tensor([[5, 0, 6]])
    with pytest.raises(ValueError, match="contiguous"):
        pack_rows(seqs, (seqs != 0).long(), shared=0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_and_entropy_equal_the_padded_forward(model, any_batch, temperature):
    with torch.no_grad():
        packed = logprobs_and_entropy(model, any_batch, pack=True, temperature=temperature)
        padded = logprobs_and_entropy(model, any_batch, pack=False, temperature=temperature)
    for got, want in zip(packed, padded, strict=True):
        # rtol: fp32 values near 10 differ by a few ulps between AVX2 and AVX-512 kernels
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1.3e-6)
    assert bool((packed[0] != 0).sum() == any_batch["response_mask"].sum())


def test_gradients_equal_the_padded_forward(model, any_batch):
    weights = torch.randn(any_batch["response_mask"].shape, generator=torch.Generator().manual_seed(1))

    packed = _weighted_gradients(model, any_batch, weights, pack=True)
    _assert_same_gradients(packed, _weighted_gradients(model, any_batch, weights, pack=False))


def test_only_real_tokens_run_through_the_model(model, make_batch):
    prompts, responses = (45, 50, 42, 48), (4, 2, 3, 1)
    batch = with_shared_prefix(make_batch(prompts, responses), prompts)
    shapes = []
    handle = model.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        with torch.no_grad():
            logprobs_and_entropy(model, batch, pack=True)
    finally:
        handle.remove()
    own = sum(p - SHARED + r for p, r in zip(prompts, responses, strict=True))
    assert shapes == [(1, SHARED), (1, own)]  # the prefix once, then 5 + 10 + 2 + 8 + 4 + 2 + 3 + 1 tokens


@pytest.fixture(params=CHECKPOINTING)
def checkpointed_model(request, model_path):
    """The tiny model in training mode with activation checkpointing on (reentrant or not)."""
    model = load_causal_lm(model_path)
    enable_gradient_checkpointing(model, use_reentrant=request.param == "reentrant")
    return model.train()


def test_packed_gradients_with_checkpointing_equal_those_without(model, checkpointed_model, any_batch):
    weights = torch.randn(any_batch["response_mask"].shape, generator=torch.Generator().manual_seed(1))

    checkpointed = _weighted_gradients(checkpointed_model, any_batch, weights, pack=True)
    _assert_same_gradients(checkpointed, _weighted_gradients(model, any_batch, weights, pack=True))


def _weighted_gradients(network, batch, weights, pack: bool) -> dict[str, torch.Tensor]:
    """Gradients of ``sum(logprobs * weights + 0.1 * entropy)`` over ``batch``'s response tokens."""
    network.zero_grad()
    logprobs, entropy = logprobs_and_entropy(network, batch, pack)
    (logprobs * weights + 0.1 * entropy).sum().backward()
    return {name: p.grad.clone() for name, p in network.named_parameters() if p.grad is not None}


def _assert_same_gradients(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys() and len(expected) > 0
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("checkpointing", CHECKPOINTING)
@pytest.mark.parametrize("lora_rank", [0, 4])
def test_a_packed_mini_batch_gradient_with_checkpointing_equals_the_one_with_a_shared_prefix_pass(
    build_policy, make_batch, lora_rank, checkpointing
):
    prompts, responses = (45, 50, 42, 48), (4, 2, 3, 1)
    gradients = []
    for mode in (None, checkpointing):  # without checkpointing, the mini-batch's rows share one prefix pass
        torch.manual_seed(0)  # the same initial weights (LoRA init) for both workers
        worker = build_policy(
            lora_rank=lora_rank, sample_packing=True, gradient_checkpointing=mode, use_entropy_loss=True
        )
        batch = with_shared_prefix(make_batch(prompts, responses), prompts)
        batch["advantages"] = torch.randn(batch["loss_mask"].shape, generator=torch.Generator().manual_seed(2))
        batch["action_log_probs"] = worker.compute_logprobs(batch, micro_batch_size=4)
        worker.forward_backward(batch, micro_batch_size=2)
        gradients.append({name: p.grad.clone() for name, p in worker.model.named_parameters() if p.requires_grad})
    plain, checkpointed = gradients
    assert checkpointed.keys() == plain.keys() and any(bool(grad.any()) for grad in plain.values())
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], atol=1e-6, rtol=1e-4, msg=name)


def test_with_checkpointing_the_update_runs_rows_whole_and_the_old_logprob_pass_shares_the_prefix(
    build_policy, make_batch
):
    prompts, responses = (45, 50, 42, 48), (4, 2, 3, 1)
    worker = build_policy(lora_rank=4, sample_packing=True, gradient_checkpointing="non_reentrant")
    batch = with_shared_prefix(make_batch(prompts, responses), prompts)
    batch["advantages"][:, 0] = 1.0
    shapes = []
    worker.model.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    batch["action_log_probs"] = worker.compute_logprobs(batch, micro_batch_size=2)
    worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    own = [p - SHARED + r for p, r in zip(prompts, responses, strict=True)]
    whole = [p + r for p, r in zip(prompts, responses, strict=True)]
    assert shapes == [
        (1, SHARED),  # eval mode recomputes nothing: the old-logprob pass shares the prefix
        (1, own[0] + own[1]),
        (1, own[2] + own[3]),
        (1, whole[0] + whole[1]),  # checkpointed layers cannot read a cache: the update runs every row whole
        (1, whole[2] + whole[3]),
    ]


@pytest.mark.parametrize("checkpointing", [None, *CHECKPOINTING])
@pytest.mark.parametrize("lora_rank", [0, 4])
def test_a_policy_update_with_packing_gives_the_same_weights_losses_and_old_logprobs(
    build_policy, make_batch, lora_rank, checkpointing
):
    prompts, responses = (45, 50, 42, 48), (4, 2, 3, 1)
    results = []
    for packing in (False, True):  # padded without checkpointing, then packed with `checkpointing`
        torch.manual_seed(0)  # the same initial weights (LoRA init) for both workers
        worker = build_policy(
            lora_rank=lora_rank,
            sample_packing=packing,
            gradient_checkpointing=checkpointing if packing else None,
            use_entropy_loss=True,
        )
        batch = with_shared_prefix(make_batch(prompts, responses), prompts)
        batch["advantages"] = torch.randn(batch["loss_mask"].shape, generator=torch.Generator().manual_seed(2))
        batch["action_log_probs"] = worker.compute_logprobs(batch, micro_batch_size=4)
        metrics = worker.ppo_train(batch, mini_batch_size=2, micro_batch_size=1, update_epochs=2)
        weights = {name: p.detach().clone() for name, p in worker.model.named_parameters() if p.requires_grad}
        results.append((batch["action_log_probs"], metrics, weights))
    (old_padded, metrics_padded, weights_padded), (old_packed, metrics_packed, weights_packed) = results
    torch.testing.assert_close(old_packed, old_padded, atol=1e-5, rtol=0)
    for key in ("policy/final_loss", "policy/policy_loss", "policy/policy_entropy", "policy/grad_norm"):
        assert metrics_packed[key] == pytest.approx(metrics_padded[key], rel=1e-4, abs=1e-6), key
    assert metrics_packed["policy/ratio_max"] != 1.0  # the second epoch ran on moved weights
    # Adam divides by the gradient's RMS, so a float-rounding difference in a near-zero gradient can move a weight by
    # a fraction of lr (1e-3 here, 4 steps): far below one step, far above float rounding.
    for name, value in weights_padded.items():
        torch.testing.assert_close(weights_packed[name], value, atol=1e-4, rtol=0, msg=name)


def test_with_packing_a_mini_batch_shares_one_prefix_pass_across_micro_batches(build_policy, make_batch):
    prompts, responses = (45, 50, 42, 48), (4, 2, 3, 1)
    worker = build_policy(lora_rank=4, sample_packing=True)
    batch = with_shared_prefix(make_batch(prompts, responses), prompts)
    batch["advantages"][:, 0] = 1.0  # a loss with a gradient: zero-advantage micro-batches skip their backward
    batch["action_log_probs"] = worker.compute_logprobs(batch, micro_batch_size=2)
    shapes = []
    worker.model.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    own = [p - SHARED + r for p, r in zip(prompts, responses, strict=True)]
    # The prefix without grad, each micro-batch packed, then the prefix again with grad for the summed backward.
    assert shapes == [(1, SHARED), (1, own[0] + own[1]), (1, own[2] + own[3]), (1, SHARED)]


@pytest.mark.parametrize("attention_dropout, prefix_passes", [(0.0, 2), (0.1, 1)])
def test_a_prefix_shared_by_micro_batches_is_recomputed_for_its_backward_only_without_dropout(
    model, attention_dropout, prefix_passes
):
    from skyrl_train.workers.shared_prefix import SharedPrefix

    calls = []
    handle = model.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(1), with_kwargs=True
    )
    model.config.attention_dropout = attention_dropout
    model.train()
    try:
        prefix = SharedPrefix(model, torch.arange(7, 7 + SHARED), for_micro_batches=True)
        cache = prefix.cache(1)
        (cache.layers[0].keys.sum() + cache.layers[-1].values.sum()).backward()
        prefix.backward()
    finally:
        handle.remove()
        model.config.attention_dropout = 0.0
        model.eval()
    assert len(calls) == prefix_passes
    assert all(p.grad is not None for p in model.model.embed_tokens.parameters())
    model.zero_grad(set_to_none=True)
