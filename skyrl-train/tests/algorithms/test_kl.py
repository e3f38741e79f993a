"""KL estimators and KL controllers.

Tokens: logp = [-1.0, -2.0, -0.5], ref = [-1.5, -1.0, -9.0], mask = [1, 1, 0];
so delta = logp - ref = [0.5, -1.0, (masked)].
"""

import pytest
import torch
from torch.testing import assert_close

from skyrl_train.config.schema import AlgorithmConfig, KLCtrlConfig
from skyrl_train.utils.ppo_utils import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    compute_approx_kl,
    get_kl_controller,
)

LOGP = torch.tensor([[-1.0, -2.0, -0.5]])
REF = torch.tensor([[-1.5, -1.0, -9.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0]])


def test_k1_is_the_log_ratio():
    assert_close(compute_approx_kl(LOGP, REF, MASK, "k1"), torch.tensor([[0.5, -1.0, 0.0]]))


def test_abs_is_the_absolute_log_ratio():
    assert_close(compute_approx_kl(LOGP, REF, MASK, "abs"), torch.tensor([[0.5, 1.0, 0.0]]))


def test_k2_is_half_the_squared_log_ratio():
    assert_close(compute_approx_kl(LOGP, REF, MASK, "k2"), torch.tensor([[0.125, 0.5, 0.0]]))


def test_k3_is_exp_minus_one_minus_reverse_log_ratio():
    # d = ref - logp = [-0.5, 1.0]: exp(-0.5) + 0.5 - 1 = 0.1065307; exp(1) - 1 - 1 = 0.7182818
    assert_close(compute_approx_kl(LOGP, REF, MASK, "k3"), torch.tensor([[0.1065307, 0.7182818, 0.0]]))


def test_k3_is_clamped_to_ten():
    # d = 30 is clamped to 20 before exp, and exp(20) - 21 is clamped to 10.
    kl = compute_approx_kl(torch.tensor([[-30.0]]), torch.tensor([[0.0]]), None, "k3")
    assert kl.item() == 10.0


def test_unknown_kl_estimator_lists_the_available_ones():
    with pytest.raises(ValueError, match="k1, k2, k3, abs"):
        compute_approx_kl(LOGP, REF, MASK, "low_var_kl")


def test_kl_penalty_in_reward_subtracts_coef_times_kl_on_valid_tokens():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    logp = torch.tensor([[0.5, -1.0, 0.2], [0.4, 0.6, 3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    new_rewards, current_kl = apply_kl_penalty(
        rewards, logp, torch.zeros(2, 3), mask, kl_coef=0.1, kl_estimator_type="k1"
    )
    assert_close(new_rewards, torch.tensor([[-0.05, 0.1, 0.98], [-0.04, 1.94, 0.0]]))
    # Per-sequence mean KL: (0.5 - 1 + 0.2)/3 = -0.1 and (0.4 + 0.6)/2 = 0.5; their mean is 0.2.
    assert current_kl == pytest.approx(0.2)


def test_current_kl_of_the_reward_penalty_leaves_out_rows_without_a_loss_token():
    logp = torch.tensor([[0.5, -1.0, 0.2], [0.4, 0.6, 3.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])  # tool results between; a dropped row
    rewards, current_kl = apply_kl_penalty(
        torch.zeros(3, 3), logp, torch.zeros(3, 3), mask, kl_coef=1.0, kl_estimator_type="k1"
    )
    assert_close(rewards, -logp * mask)
    # (0.5 + 0.2)/2 = 0.35 and 0.6; the row without loss tokens is not a zero in the mean.
    assert current_kl == pytest.approx(0.475)
    assert apply_kl_penalty(torch.zeros(1, 3), logp[:1], torch.zeros(1, 3), mask[2:], 1.0, "k1")[1] == 0.0


def test_fixed_controller_never_changes():
    ctrl = FixedKLController(0.05)
    ctrl.update(current_kl=10.0, n_steps=100)
    assert ctrl.value == 0.05


def test_adaptive_controller_raises_coef_when_kl_is_above_target_with_error_clipped():
    ctrl = AdaptiveKLController(init_kl_coef=0.1, kl_target=0.1, horizon=100)
    ctrl.update(current_kl=0.15, n_steps=10)  # error 0.5 clipped to 0.2: 0.1 * (1 + 0.2 * 10/100)
    assert ctrl.value == pytest.approx(0.102)


def test_adaptive_controller_lowers_coef_when_kl_is_below_target():
    ctrl = AdaptiveKLController(init_kl_coef=0.1, kl_target=0.1, horizon=100)
    ctrl.update(current_kl=0.09, n_steps=10)  # error -0.1: 0.1 * (1 - 0.1 * 10/100)
    assert ctrl.value == pytest.approx(0.099)


def test_get_kl_controller_reads_the_algorithm_config():
    cfg = AlgorithmConfig(kl_loss_coef=0.01, kl_ctrl=KLCtrlConfig(type="adaptive", kl_target=0.2, horizon=500))
    ctrl = get_kl_controller(cfg)
    assert isinstance(ctrl, AdaptiveKLController)
    assert (ctrl.value, ctrl.kl_target, ctrl.horizon) == (0.01, 0.2, 500)
    fixed = get_kl_controller(AlgorithmConfig(kl_loss_coef=0.01, kl_ctrl=KLCtrlConfig(type="fixed")))
    assert isinstance(fixed, FixedKLController)
    assert fixed.value == 0.01
