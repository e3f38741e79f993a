"""Advantage estimators, checked against hand-computed values.

Batch used by the group tests: two groups ("a", "b") of three samples, three tokens each. The outcome score of a
sample is the sum of its token rewards:

    a1 rewards [0, 0, 1]     mask [1, 1, 1]  score 1
    a2 rewards [0, 0, 0]     mask [1, 1, 0]  score 0
    a3 rewards [0.5, 0, 1.5] mask [1, 1, 1]  score 2   -> group a: mean 1, unbiased std 1
    b1 rewards [0, 0, 0]     mask [1, 0, 0]  score 0
    b2 rewards [0, 0, 0]     mask [1, 1, 1]  score 0
    b3 rewards [0, 0, 3]     mask [1, 1, 1]  score 3   -> group b: mean 1, unbiased std sqrt(3)
"""

import pytest
import torch
from torch.testing import assert_close

from skyrl_train.utils.ppo_utils import (
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_rloo_outcome_advantage,
    normalize_advantages_over_batch,
)

UIDS = ["a", "a", "a", "b", "b", "b"]
REWARDS = torch.tensor(
    [
        [0.0, 0.0, 1.0],
        [0.0, 0.0, 0.0],
        [0.5, 0.0, 1.5],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 3.0],
    ]
)
MASK = torch.tensor(
    [
        [1.0, 1.0, 1.0],
        [1.0, 1.0, 0.0],
        [1.0, 1.0, 1.0],
        [1.0, 0.0, 0.0],
        [1.0, 1.0, 1.0],
        [1.0, 1.0, 1.0],
    ]
)


def test_grpo_with_std_normalisation_divides_by_group_std_plus_eps():
    adv, returns = compute_grpo_outcome_advantage(
        token_level_rewards=REWARDS, response_mask=MASK, index=UIDS, grpo_norm_by_std=True
    )
    # a: (score - 1) / (1 + 1e-6); b: (score - 1) / (sqrt(3) + 1e-6); broadcast over the mask.
    expected = torch.tensor(
        [
            [0.0, 0.0, 0.0],
            [-0.999999, -0.999999, 0.0],
            [0.999999, 0.999999, 0.999999],
            [-0.577350, 0.0, 0.0],
            [-0.577350, -0.577350, -0.577350],
            [1.154700, 1.154700, 1.154700],
        ]
    )
    assert_close(adv, expected, atol=1e-6, rtol=0)
    assert_close(returns, adv)


def test_grpo_without_std_normalisation_subtracts_group_mean_only():
    adv, _ = compute_grpo_outcome_advantage(
        token_level_rewards=REWARDS, response_mask=MASK, index=UIDS, grpo_norm_by_std=False
    )
    expected = torch.tensor(
        [
            [0.0, 0.0, 0.0],
            [-1.0, -1.0, 0.0],
            [1.0, 1.0, 1.0],
            [-1.0, 0.0, 0.0],
            [-1.0, -1.0, -1.0],
            [2.0, 2.0, 2.0],
        ]
    )
    assert_close(adv, expected)


def test_grpo_singleton_group_uses_mean_zero_and_std_one():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 3.0], [0.0, 5.0]])
    mask = torch.ones(3, 2)
    adv, _ = compute_grpo_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=["a", "a", "s"], grpo_norm_by_std=True
    )
    # group a: mean 2, std sqrt(2) -> -+1/sqrt(2); singleton s: (5 - 0) / (1 + 1e-6).
    expected = torch.tensor([[-0.707106, -0.707106], [0.707106, 0.707106], [4.999995, 4.999995]])
    assert_close(adv, expected, atol=1e-6, rtol=0)


def test_grpo_accepts_integer_tensor_index():
    adv, _ = compute_grpo_outcome_advantage(
        token_level_rewards=REWARDS,
        response_mask=MASK,
        index=torch.tensor([7, 7, 7, 3, 3, 3]),
        grpo_norm_by_std=False,
    )
    assert_close(adv[:, 0], torch.tensor([0.0, -1.0, 1.0, -1.0, -1.0, 2.0]))


def test_grpo_baseline_mask_keeps_excluded_samples_out_of_mean_and_std():
    # Group a has a 4th sample that hit an env-init error (reward 0). Scored as a failure it would give
    # mean 0.75; excluded, the three healthy samples keep mean 1 and std 1, and the failure gets 0.
    rewards = torch.tensor([[1.0], [0.0], [2.0], [0.0]])
    mask = torch.ones(4, 1)
    adv, returns = compute_grpo_outcome_advantage(
        token_level_rewards=rewards,
        response_mask=mask,
        index=["a", "a", "a", "a"],
        baseline_mask=torch.tensor([True, True, True, False]),
    )
    assert_close(adv, torch.tensor([[0.0], [-0.999999], [0.999999], [0.0]]), atol=1e-6, rtol=0)
    assert_close(returns, adv)


def test_grpo_group_left_with_one_included_sample_is_a_singleton():
    rewards = torch.tensor([[1.0], [0.0], [4.0]])
    adv, _ = compute_grpo_outcome_advantage(
        token_level_rewards=rewards,
        response_mask=torch.ones(3, 1),
        index=["a", "a", "b"],
        grpo_norm_by_std=False,
        baseline_mask=torch.tensor([True, False, True]),
    )
    assert_close(adv, torch.tensor([[1.0], [0.0], [4.0]]))


def test_rloo_subtracts_mean_of_the_other_samples():
    adv, returns = compute_rloo_outcome_advantage(token_level_rewards=REWARDS, response_mask=MASK, index=UIDS)
    # a: scores [1, 0, 2] -> [1 - 1, 0 - 1.5, 2 - 0.5]; b: scores [0, 0, 3] -> [0 - 1.5, 0 - 1.5, 3 - 0].
    expected = torch.tensor(
        [
            [0.0, 0.0, 0.0],
            [-1.5, -1.5, 0.0],
            [1.5, 1.5, 1.5],
            [-1.5, 0.0, 0.0],
            [-1.5, -1.5, -1.5],
            [3.0, 3.0, 3.0],
        ]
    )
    assert_close(adv, expected)
    assert_close(returns, adv)


def test_rloo_singleton_group_gets_zero_advantage_with_a_warning():
    with pytest.warns(UserWarning, match="single sample"):
        adv, _ = compute_rloo_outcome_advantage(
            token_level_rewards=torch.tensor([[1.0], [3.0], [5.0]]),
            response_mask=torch.ones(3, 1),
            index=["a", "a", "s"],
        )
    assert_close(adv, torch.tensor([[-2.0], [2.0], [0.0]]))


def test_rloo_baseline_mask_excludes_samples_from_the_leave_one_out_mean():
    adv, _ = compute_rloo_outcome_advantage(
        token_level_rewards=torch.tensor([[1.0], [0.0], [2.0], [0.0]]),
        response_mask=torch.ones(4, 1),
        index=["a"] * 4,
        baseline_mask=torch.tensor([True, True, True, False]),
    )
    assert_close(adv, torch.tensor([[0.0], [-1.5], [1.5], [0.0]]))


def test_reinforce_plus_plus_discounts_and_whitens_over_the_batch():
    # gamma = 0.5. Row 1's last token is padding; its reward (5) must not leak into earlier tokens.
    rewards = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, returns = compute_reinforce_plus_plus_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, gamma=0.5
    )
    # Returns: row 0 [1 + 0.5*1, 0 + 0.5*2, 2] = [1.5, 1, 2]; row 1 [0 + 0.5*1, 1, (masked)] = [0.5, 1, 0].
    assert_close(returns, torch.tensor([[1.5, 1.0, 2.0], [0.5, 1.0, 0.0]]))
    # Whitening over the 5 valid returns: mean 1.2, unbiased var 1.3 / 4 = 0.325.
    expected = torch.tensor([[0.526235, -0.350823, 1.403293], [-1.227881, -0.350823, 0.0]])
    assert_close(adv, expected, atol=1e-5, rtol=0)


def test_reinforce_plus_plus_excluded_samples_get_zero_and_stay_out_of_whitening():
    rewards = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 5.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv, returns = compute_reinforce_plus_plus_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, gamma=0.5, baseline_mask=torch.tensor([True, True, False])
    )
    expected = torch.tensor([[0.526235, -0.350823, 1.403293], [-1.227881, -0.350823, 0.0], [0.0, 0.0, 0.0]])
    assert_close(adv, expected, atol=1e-5, rtol=0)
    assert_close(returns[2], torch.zeros(3))


GAE_REWARDS = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
GAE_VALUES = torch.tensor([[0.5, 0.5, 0.5], [0.2, 0.4, 9.0]])  # 9.0 sits on padding and must be ignored
GAE_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def test_gae_returns_are_advantages_plus_values_before_whitening():
    # gamma = lambda = 0.5.
    # row 0: deltas [-0.25, -0.25, 0.5] -> A [-0.28125, -0.125, 0.5]
    # row 1: V [0.2, 0.4, 0]; deltas [0, 0.6, 0] -> A [0.15, 0.6, 0]
    _, returns = compute_gae_advantage_return(
        token_level_rewards=GAE_REWARDS, values=GAE_VALUES, response_mask=GAE_MASK, gamma=0.5, lambd=0.5
    )
    assert_close(returns, torch.tensor([[0.21875, 0.375, 1.0], [0.35, 1.0, 0.0]]))


def test_gae_advantages_are_whitened_over_valid_tokens():
    adv, _ = compute_gae_advantage_return(
        token_level_rewards=GAE_REWARDS, values=GAE_VALUES, response_mask=GAE_MASK, gamma=0.5, lambd=0.5
    )
    # Raw A over valid tokens [-0.28125, -0.125, 0.5, 0.15, 0.6]: mean 0.16875, unbiased var 0.1462109375.
    expected = torch.tensor([[-1.176854, -0.768224, 0.866295], [-0.049036, 1.127818, 0.0]])
    assert_close(adv, expected, atol=1e-5, rtol=0)


def test_gae_without_values_is_an_error():
    with pytest.raises(ValueError, match="critic"):
        compute_gae_advantage_return(token_level_rewards=GAE_REWARDS, values=None, response_mask=GAE_MASK)


def test_advantage_batch_normalize_hand_computed():
    # Trained-on tokens hold 1, 1 and -1: mean 1/3, unbiased variance ((2/3)² + (2/3)² + (4/3)²) / 2 = 4/3.
    advantages = torch.tensor([[1.0, 1.0, 0.0], [-1.0, 5.0, 0.0]])
    loss_mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    std = (4 / 3) ** 0.5
    expected = torch.tensor([[(2 / 3) / std, (2 / 3) / std, 0.0], [-(4 / 3) / std, 0.0, 0.0]])
    assert torch.allclose(normalize_advantages_over_batch(advantages, loss_mask), expected, atol=1e-6)
