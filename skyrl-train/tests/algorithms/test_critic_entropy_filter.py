"""Critic value loss, token entropy and the zero-variance filter."""

import math

import pytest
import torch
from torch.testing import assert_close

from skyrl_train.utils.ppo_utils import compute_entropy, compute_zero_variance_mask, ppo_critic_loss

# token 0: V moved 0.5 away from V_old -> the clipped value 0.7 is further from R = 2; token 1: V within the clip.
VALUES = torch.tensor([[1.0, 2.0, 3.0]])
OLD_VALUES = torch.tensor([[0.5, 2.1, 0.0]])
RETURNS = torch.tensor([[2.0, 1.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0]])


def test_value_loss_takes_the_larger_of_clipped_and_unclipped_squared_errors():
    loss, metrics = ppo_critic_loss(VALUES, OLD_VALUES, RETURNS, MASK, value_clip=0.2)
    # token 0: 0.5 * max((1 - 2)^2, (0.7 - 2)^2) = 0.845; token 1: 0.5 * (2 - 1)^2 = 0.5; token 2 masked.
    assert_close(loss, torch.tensor([[0.845, 0.5, 0.0]]))
    assert metrics["values_clipfrac"] == pytest.approx(0.5)
    assert metrics["values_mean"] == pytest.approx(1.5)


def test_value_loss_without_clipping_is_half_squared_error():
    loss, _ = ppo_critic_loss(VALUES, OLD_VALUES, RETURNS, MASK, value_clip=None)
    assert_close(loss, torch.tensor([[0.5, 0.5, 0.0]]))


def test_entropy_from_logits_is_masked():
    # uniform over 2 -> ln 2; probabilities [0.25, 0.75] -> 0.5623351; third position masked.
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)], [5.0, 0.0]]])
    entropy = compute_entropy(logits, torch.tensor([[1.0, 1.0, 0.0]]))
    assert_close(entropy, torch.tensor([[0.6931472, 0.5623351, 0.0]]))


def test_zero_variance_filter_drops_groups_with_identical_rewards_and_keeps_singletons():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.0, 0.0, 0.0])
    index = ["a", "a", "b", "b", "single", "d", "d", "d"]
    keep = compute_zero_variance_mask(rewards, index)
    assert keep.tolist() == [False, False, True, True, True, False, False, False]


def test_zero_variance_filter_sums_token_level_rewards():
    rewards = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    keep = compute_zero_variance_mask(rewards, ["a", "a", "b", "b"])
    assert keep.tolist() == [False, False, True, True]
