"""Custom policy losses written for upstream skyrl-train 0.3 (`skyrl_train.algorithms.loss_calls`): a loss that reduces
itself and returns its clip ratio as a float, without a ``rollout_logprobs`` parameter, trains as its per-token form
does."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.algorithms import PolicyLossRegistry, ppo_policy_loss
from skyrl_train.algorithms.loss_calls import call_policy_loss
from skyrl_train.config.schema import AlgorithmConfig, OffPolicyCorrectionConfig

ADVANTAGES = torch.tensor([[0.5, -1.0, 2.0, 0.25], [1.0, -0.5, 0.0, 0.0], [-2.0, 1.5, 0.5, 0.0], [0.75, 0.0, 0.0, 0.0]])
"""Per response token of the standard batch (responses of 4, 2, 3, 1 tokens); zero on padding."""


def reduced_regular(log_probs, old_log_probs, advantages, config, loss_mask=None):
    """The built-in ``regular`` loss in upstream 0.3's form: its token mean over the batch given, and the clip ratio."""
    per_token, metrics = ppo_policy_loss(log_probs, old_log_probs, advantages, config, loss_mask)
    return (per_token * loss_mask).sum() / loss_mask.sum(), metrics["clip_ratio"]


@pytest.fixture
def upstream_loss():
    PolicyLossRegistry.register("test_reduced_regular", reduced_regular)
    yield "test_reduced_regular"
    PolicyLossRegistry.unregister("test_reduced_regular")


def _trained(worker, batch, on_policy, micro_batch_size):
    """Two updates of `worker` on `batch` (mini-batches of 2 rows); their metrics and the weights after them."""
    batch["advantages"] = ADVANTAGES.clone()
    metrics = worker.ppo_train(on_policy(worker, batch), mini_batch_size=2, micro_batch_size=micro_batch_size)
    return metrics, {name: p.detach().clone() for name, p in worker.model.named_parameters()}


def test_a_loss_that_reduces_itself_trains_as_its_per_token_form(
    build_policy, make_batch, batch, on_policy, upstream_loss
):
    # One micro-batch per mini-batch: the loss's own token mean is the token_mean reduction of the built-in loss.
    builtin_metrics, builtin_weights = _trained(build_policy(), make_batch(), on_policy, micro_batch_size=2)
    metrics, weights = _trained(build_policy(policy_loss_type=upstream_loss), batch, on_policy, micro_batch_size=2)
    assert metrics["policy/policy_loss"] == pytest.approx(builtin_metrics["policy/policy_loss"], abs=1e-6)
    assert metrics["policy/loss_metrics/clip_ratio"] == builtin_metrics["policy/loss_metrics/clip_ratio"]
    assert "policy/loss_metrics/clip_frac_low" not in metrics  # only what the loss returned: its clip ratio
    for name, weight in weights.items():
        torch.testing.assert_close(weight, builtin_weights[name], rtol=0, atol=1e-6)


def test_a_loss_that_reduces_itself_counts_each_micro_batch_by_its_rows(build_policy, batch, on_policy, upstream_loss):
    # Micro-batches of one row: the mini-batch's loss is the mean of its rows' token means (upstream's mean of
    # micro-batch losses), no longer the mean over all its tokens.
    worker = build_policy(policy_loss_type=upstream_loss, lr=0.0)
    batch["advantages"] = ADVANTAGES.clone()
    on_policy(worker, batch)
    row_means = -(ADVANTAGES.sum(dim=1) / batch["loss_mask"].sum(dim=1))  # on-policy, unclipped: -A per token
    metrics = worker.ppo_train(batch, mini_batch_size=2, micro_batch_size=1)
    expected = (row_means[:2].mean() + row_means[2:].mean()) / 2  # averaged over the two optimizer steps
    assert metrics["policy/policy_loss"] == pytest.approx(expected.item(), abs=1e-6)


def test_a_loss_that_reduces_itself_is_refused_with_an_off_policy_correction(
    build_policy, batch, on_policy, upstream_loss
):
    worker = build_policy(
        policy_loss_type=upstream_loss, off_policy_correction=OffPolicyCorrectionConfig(tis_ratio_type="token")
    )
    on_policy(worker, batch)
    batch["rollout_logprobs"] = batch["action_log_probs"].clone()
    with pytest.raises(ValueError, match="policy_loss_type='test_reduced_regular' returns a reduced"):
        worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=4)


def test_rollout_logprobs_are_passed_only_to_a_loss_that_takes_them():
    log_probs = torch.zeros((1, 2))
    mask = torch.ones((1, 2))
    received = {}

    def takes_them(log_probs, old_log_probs, advantages, config, loss_mask=None, rollout_logprobs=None):
        received["rollout_logprobs"] = rollout_logprobs
        return log_probs, {"marker": 1.0}

    config = AlgorithmConfig()
    result = call_policy_loss(
        takes_them, log_probs, log_probs, log_probs, config=config, loss_mask=mask, rollout_logprobs=mask
    )
    assert received["rollout_logprobs"] is mask
    assert (result.reduced, result.metrics) == (False, {"marker": 1.0})
    result = call_policy_loss(
        reduced_regular, log_probs, log_probs, log_probs, config=config, loss_mask=mask, rollout_logprobs=mask
    )
    assert (result.reduced, result.metrics) == (True, {"clip_ratio": 0.0})
