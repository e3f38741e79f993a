"""Advantage-estimator and policy-loss registries."""

import pytest
import torch
from torch.testing import assert_close

from skyrl_train.utils.ppo_utils import (
    AdvantageEstimatorRegistry,
    PolicyLossRegistry,
    compute_advantages_and_returns,
    compute_grpo_outcome_advantage,
    cross_entropy_loss,
    dual_clip_policy_loss,
    gspo_policy_loss,
    ppo_policy_loss,
    register_advantage_estimator,
)


@pytest.fixture
def cleanup():
    """Names registered by a test; unregistered afterwards so tests stay independent."""
    registered: list[tuple[type, str]] = []
    yield registered
    for registry, name in registered:
        if registry.is_registered(name):
            registry.unregister(name)


def _dummy_estimator(*, token_level_rewards, response_mask, **kwargs):
    return token_level_rewards, token_level_rewards


def test_builtin_estimators_are_registered_under_upstream_names():
    assert AdvantageEstimatorRegistry.list_available() == ["gae", "grpo", "reinforce++", "rloo"]
    assert AdvantageEstimatorRegistry.get("grpo") is compute_grpo_outcome_advantage


def test_builtin_policy_losses_are_registered_under_upstream_names():
    assert PolicyLossRegistry.list_available() == ["cross_entropy", "dual_clip", "gspo", "regular"]
    assert PolicyLossRegistry.get("regular") is ppo_policy_loss
    assert PolicyLossRegistry.get("dual_clip") is dual_clip_policy_loss
    assert PolicyLossRegistry.get("gspo") is gspo_policy_loss
    assert PolicyLossRegistry.get("cross_entropy") is cross_entropy_loss


def test_register_then_get_returns_the_function(cleanup):
    AdvantageEstimatorRegistry.register("dummy", _dummy_estimator)
    cleanup.append((AdvantageEstimatorRegistry, "dummy"))
    assert AdvantageEstimatorRegistry.get("dummy") is _dummy_estimator
    assert "dummy" in AdvantageEstimatorRegistry.list_available()


def test_register_works_as_a_decorator(cleanup):
    @PolicyLossRegistry.register("my_loss")
    def my_loss(log_probs, old_log_probs, advantages, config, loss_mask=None, rollout_logprobs=None):
        return -advantages * log_probs, {}

    cleanup.append((PolicyLossRegistry, "my_loss"))
    assert PolicyLossRegistry.get("my_loss") is my_loss


def test_registering_a_taken_name_is_an_error(cleanup):
    AdvantageEstimatorRegistry.register("dummy", _dummy_estimator)
    cleanup.append((AdvantageEstimatorRegistry, "dummy"))
    with pytest.raises(ValueError, match="already registered"):
        AdvantageEstimatorRegistry.register("dummy", _dummy_estimator)
    with pytest.raises(ValueError, match="already registered"):
        PolicyLossRegistry.register("regular", ppo_policy_loss)


def test_unregister_removes_the_name(cleanup):
    AdvantageEstimatorRegistry.register("dummy", _dummy_estimator)
    cleanup.append((AdvantageEstimatorRegistry, "dummy"))
    AdvantageEstimatorRegistry.unregister("dummy")
    assert "dummy" not in AdvantageEstimatorRegistry.list_available()
    with pytest.raises(ValueError, match="unknown"):
        AdvantageEstimatorRegistry.unregister("dummy")


def test_unknown_name_error_lists_available_names():
    with pytest.raises(
        ValueError, match=r"Unknown advantage estimator 'nope'\. Available: gae, grpo, reinforce\+\+, rloo"
    ):
        AdvantageEstimatorRegistry.get("nope")
    with pytest.raises(ValueError, match="Available: cross_entropy, dual_clip, gspo, regular"):
        PolicyLossRegistry.get("nope")


def test_registries_are_separate(cleanup):
    AdvantageEstimatorRegistry.register("dummy", _dummy_estimator)
    cleanup.append((AdvantageEstimatorRegistry, "dummy"))
    assert not PolicyLossRegistry.is_registered("dummy")


def test_custom_estimator_is_used_by_name(cleanup):
    @register_advantage_estimator("max_baseline")
    def max_baseline(*, token_level_rewards, response_mask, **kwargs):
        """Advantage = score - max score in the batch."""
        scores = token_level_rewards.sum(-1)
        adv = (scores - scores.max()).unsqueeze(-1) * response_mask
        return adv, adv

    cleanup.append((AdvantageEstimatorRegistry, "max_baseline"))
    adv, _ = compute_advantages_and_returns(
        "max_baseline",
        token_level_rewards=torch.tensor([[0.0, 1.0], [0.0, 3.0]]),
        response_mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
        index=["a", "a"],
        values=None,
        gamma=1.0,
        lambd=1.0,
        grpo_norm_by_std=True,
    )
    assert_close(adv, torch.tensor([[-2.0, -2.0], [0.0, 0.0]]))
