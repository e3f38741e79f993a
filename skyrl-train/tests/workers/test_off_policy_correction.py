"""The policy worker applies ``trainer.algorithm.off_policy_correction`` to the per-token loss of any policy loss,
with metrics that are exact per mini-batch whatever the micro-batch size.

The standard four-row batch (responses of 4, 2, 3, 1 tokens, 10 loss tokens) with old logprobs from the worker
itself, so the PPO ratio is 1 and the ``regular`` per-token loss is ``−A``. The rollout logprobs are the old ones
shifted per row, giving each row one importance ratio ``is = exp(old − rollout)``: ``ROW_RATIOS``.
"""

from __future__ import annotations

import math

import pytest
import torch

from skyrl_train.algorithms import PolicyLossRegistry
from skyrl_train.config.schema import OffPolicyCorrectionConfig

ROW_RATIOS = torch.tensor([3.0, 0.5, 1.0, 1.5])
ROW_TOKENS = torch.tensor([4.0, 2.0, 3.0, 1.0])


def _with_rollout_logprobs(batch, ratios=ROW_RATIOS):
    batch["rollout_logprobs"] = (batch["action_log_probs"] - ratios.log()[:, None]) * batch["loss_mask"]
    return batch


def _grads(worker):
    return {name: p.grad.clone() for name, p in worker.model.named_parameters() if p.grad is not None}


def test_token_tis_weights_the_loss_and_reports_exact_metrics_for_any_micro_batch_size(build_policy, batch, on_policy):
    results = []
    for micro_batch_size in (1, 4):
        worker = build_policy(
            off_policy_correction=OffPolicyCorrectionConfig(tis_ratio_type="token", token_tis_ratio_clip_high=2.0)
        )
        _with_rollout_logprobs(on_policy(worker, batch))
        batch["advantages"] = batch["loss_mask"].clone()
        results.append(worker.forward_backward(batch, micro_batch_size))
    one, four = results
    # Per-token loss −A·w with A = 1 and w = min(is, 2) = 2, 0.5, 1, 1.5 per row, over 10 tokens.
    expected_loss = -(4 * 2.0 + 2 * 0.5 + 3 * 1.0 + 1 * 1.5) / 10
    expected = {
        "loss_metrics/is_ratio_mean": (4 * 3.0 + 2 * 0.5 + 3 * 1.0 + 1 * 1.5) / 10,
        "loss_metrics/is_ratio_min": 0.5,
        "loss_metrics/is_ratio_max": 3.0,
        "loss_metrics/tis_token_clip_high_ratio": 4 / 10,  # row 0's 4 tokens
    }
    # population std over the 10 tokens: E[(r − 1)²] = (4·4 + 2·0.25 + 0 + 0.25) / 10
    expected["loss_metrics/is_ratio_std"] = math.sqrt(1.675 - (expected["loss_metrics/is_ratio_mean"] - 1) ** 2)
    for metrics in (one, four):
        assert metrics["policy_loss"] == pytest.approx(expected_loss, abs=1e-5)
        for key, value in expected.items():
            assert metrics[key] == pytest.approx(value, rel=1e-5), key


def test_row_fractions_count_rows_of_the_whole_mini_batch_across_micro_batches(build_policy, batch, on_policy):
    for micro_batch_size in (1, 3, 4):
        worker = build_policy(off_policy_correction=OffPolicyCorrectionConfig(sequence_mask_metric="geometric"))
        _with_rollout_logprobs(on_policy(worker, batch))
        metrics = worker.forward_backward(batch, micro_batch_size)
        # geometric mean ratio per row = the row's ratio: 3.0, 0.5 and 1.5 are outside [0.99, 1.01]
        assert metrics["loss_metrics/geo_sequence_mask_masked_ratio"] == pytest.approx(3 / 4)
        assert metrics["loss_metrics/geo_sequence_mask_over_high_ratio"] == pytest.approx(2 / 4)
        assert metrics["loss_metrics/geo_sequence_mask_under_low_ratio"] == pytest.approx(1 / 4)


def test_a_masked_row_gives_the_gradient_of_a_zero_advantage_row_with_the_same_normaliser(
    build_policy, batch, on_policy
):
    advantages = torch.tensor([[1.0, -2.0, 0.5, 1.0], [0.3, 0.3, 0, 0], [-1.0, 2.0, 1.0, 0], [4.0, 0, 0, 0]])
    worker = build_policy(off_policy_correction=OffPolicyCorrectionConfig(sequence_mask_metric="geometric"))
    _with_rollout_logprobs(on_policy(worker, batch))
    batch["advantages"] = advantages.clone()
    worker.forward_backward(batch, micro_batch_size=2)
    corrected = _grads(worker)

    reference = build_policy()
    on_policy(reference, batch)
    batch["advantages"] = advantages * torch.tensor([0.0, 0.0, 1.0, 0.0])[:, None]  # only row 2 is kept
    reference.forward_backward(batch, micro_batch_size=2)
    expected = _grads(reference)
    assert corrected.keys() == expected.keys()
    for name, grad in expected.items():
        torch.testing.assert_close(corrected[name], grad, atol=1e-7, rtol=1e-5)


def test_the_correction_also_applies_to_a_custom_registered_loss(build_policy, batch, on_policy):
    def surrogate(log_probs, old_log_probs, advantages, config, loss_mask=None, rollout_logprobs=None):
        return -advantages * log_probs.exp() / old_log_probs.exp() * loss_mask, {}

    PolicyLossRegistry.register("test_plain_ratio", surrogate)
    try:
        worker = build_policy(
            policy_loss_type="test_plain_ratio",
            off_policy_correction=OffPolicyCorrectionConfig(tis_ratio_type="sequence", sequence_tis_ratio_clip_high=5),
        )
        _with_rollout_logprobs(on_policy(worker, batch))
        batch["advantages"] = batch["loss_mask"].clone()
        metrics = worker.forward_backward(batch, micro_batch_size=4)
    finally:
        PolicyLossRegistry.unregister("test_plain_ratio")
    # sequence ratios: 3^4 = 81 capped at 5, 0.5^2 = 0.25, 1, 1.5
    assert metrics["policy_loss"] == pytest.approx(-(4 * 5 + 2 * 0.25 + 3 * 1 + 1 * 1.5) / 10, abs=1e-5)
    assert metrics["loss_metrics/tis_seq_clip_high_ratio"] == pytest.approx(1 / 4)


def test_without_a_correction_rollout_logprobs_do_not_touch_the_loss(build_policy, batch, on_policy):
    worker = build_policy()
    _with_rollout_logprobs(on_policy(worker, batch))
    batch["advantages"] = batch["loss_mask"].clone()
    metrics = worker.forward_backward(batch, micro_batch_size=4)
    assert metrics["policy_loss"] == pytest.approx(-1.0, abs=1e-5)
    assert not [key for key in metrics if "is_ratio" in key or "sequence_mask" in key or "tis_" in key]


def test_a_correction_without_rollout_logprobs_is_refused_before_training(build_policy, batch, on_policy):
    worker = build_policy(off_policy_correction=OffPolicyCorrectionConfig(outlier_token_is_threshold_high=10.0))
    on_policy(worker, batch)
    batch["rollout_logprobs"] = None  # as the trainer's batch holds it when the engine returned no logprobs
    before = {name: p.detach().clone() for name, p in worker.model.named_parameters()}
    with pytest.raises(ValueError, match="off_policy_correction is on but the batch has no rollout_logprobs"):
        worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=4)
    assert all(torch.equal(before[name], p) for name, p in worker.model.named_parameters())


@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full", "lora"])
def test_without_old_logprobs_the_correction_sees_the_update_forwards_logprobs(
    build_policy, batch, on_policy, lora_rank
):
    results = []
    for precomputed in (True, False):
        worker = build_policy(
            lora_rank=lora_rank,
            off_policy_correction=OffPolicyCorrectionConfig(
                tis_ratio_type="token", token_tis_ratio_clip_high=2.0, sequence_mask_metric="product"
            ),
        )
        _with_rollout_logprobs(on_policy(worker, batch))
        batch["advantages"] = batch["loss_mask"].clone()
        if not precomputed:
            del batch["action_log_probs"]
        results.append(worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2))
    given, from_forward = results
    assert given["policy/old_logprobs_from_update_forward"] == 0.0
    assert from_forward["policy/old_logprobs_from_update_forward"] == 1.0
    assert from_forward["policy/loss_metrics/product_sequence_mask_masked_ratio"] == pytest.approx(2 / 4)  # 3.0, 0.25
    for key, value in given.items():
        if "loss_metrics/" in key or key == "policy/policy_loss":
            assert from_forward[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
