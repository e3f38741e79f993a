"""Policy losses, checked against hand-computed per-token values. Old log-probs are 0, so ratio = exp(logp)."""

import math

import pytest
import torch
from torch.testing import assert_close

from skyrl_train.config.schema import AlgorithmConfig
from skyrl_train.utils.ppo_utils import dual_clip_policy_loss, gspo_policy_loss, ppo_policy_loss


def _logp(ratios: list[list[float]]) -> torch.Tensor:
    return torch.tensor([[math.log(r) for r in row] for row in ratios], requires_grad=True)


# Asymmetric clip: eps_clip_low = 0.1 (ratio floor 0.9), eps_clip_high = 0.3 (ratio ceiling 1.3).
ASYM = AlgorithmConfig(eps_clip_low=0.1, eps_clip_high=0.3)
# token:      high clip   low clip   inside    below floor, A > 0   padding
RATIOS = [[1.5, 0.5, 1.2, 0.8, 0.5]]
ADV = torch.tensor([[1.0, -1.0, 2.0, 1.0, 1.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])


def test_regular_loss_clips_with_asymmetric_eps():
    logp = _logp(RATIOS)
    loss, _ = ppo_policy_loss(logp, torch.zeros_like(logp), ADV, ASYM, MASK)
    # -min(1.5*1, 1.3*1) = -1.3 | -min(0.5*-1, 0.9*-1) = 0.9 | -1.2*2 = -2.4 | -min(0.8, 0.9) = -0.8 | masked
    assert_close(loss, torch.tensor([[-1.3, 0.9, -2.4, -0.8, 0.0]]))


def test_regular_loss_has_zero_gradient_on_clipped_tokens():
    logp = _logp(RATIOS)
    loss, _ = ppo_policy_loss(logp, torch.zeros_like(logp), ADV, ASYM, MASK)
    loss.sum().backward()
    # d(-ratio*A)/dlogp = -ratio*A on unclipped tokens.
    assert_close(logp.grad, torch.tensor([[0.0, 0.0, -2.4, -0.8, 0.0]]))


def test_regular_loss_reports_clip_fractions_and_ratio_stats_over_masked_tokens():
    logp = _logp(RATIOS)
    _, metrics = ppo_policy_loss(logp, torch.zeros_like(logp), ADV, ASYM, MASK)
    assert metrics["clip_frac_high"] == pytest.approx(0.25)
    assert metrics["clip_frac_low"] == pytest.approx(0.25)
    assert metrics["clip_ratio"] == pytest.approx(0.5)
    assert metrics["ratio_mean"] == pytest.approx(1.0)
    assert metrics["ratio_min"] == pytest.approx(0.5)
    assert metrics["ratio_max"] == pytest.approx(1.5)


def test_regular_loss_defaults_to_eps_0_2():
    logp = _logp([[1.5]])
    loss, _ = ppo_policy_loss(logp, torch.zeros_like(logp), torch.tensor([[1.0]]), AlgorithmConfig(), torch.ones(1, 1))
    assert_close(loss, torch.tensor([[-1.2]]))


def test_dual_clip_caps_the_loss_of_negative_advantages_at_c_times_abs_advantage():
    # eps 0.2 both sides, clip_ratio_c = 3.
    logp = _logp([[5.0, 2.0, 5.0]])
    adv = torch.tensor([[-1.0, -1.0, 1.0]])
    loss, metrics = dual_clip_policy_loss(
        logp, torch.zeros_like(logp), adv, AlgorithmConfig(clip_ratio_c=3.0), torch.ones(1, 3)
    )
    # regular: -min(-5, -1.2) = 5 -> capped at 3 | -min(-2, -1.2) = 2 < 3 kept | A > 0: -min(5, 1.2) = -1.2
    assert_close(loss, torch.tensor([[3.0, 2.0, -1.2]]))
    assert metrics["dual_clip_frac"] == pytest.approx(1 / 3)


def test_dual_clip_rejects_c_not_above_one():
    logp = _logp([[1.0]])
    with pytest.raises(ValueError, match="clip_ratio_c"):
        dual_clip_policy_loss(logp, torch.zeros_like(logp), torch.tensor([[-1.0]]), AlgorithmConfig(clip_ratio_c=1.0))


def _gspo_inputs():
    # Row 0: token log-ratios [0.1, 0.3, (padding 5.0)] -> sequence log-ratio 0.2 -> ratio e^0.2 = 1.2214 > 1.2.
    # Row 1: token log-ratios [-0.1, 0.0, 0.1] -> sequence log-ratio 0 -> ratio 1.
    logp = torch.tensor([[0.1, 0.3, 5.0], [-0.1, 0.0, 0.1]], requires_grad=True)
    old = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-0.5, -0.5, -0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    return logp, old, adv, mask


def test_gspo_uses_the_geometric_mean_ratio_of_each_sequence():
    logp, old, adv, mask = _gspo_inputs()
    loss, metrics = gspo_policy_loss(logp, old, adv, AlgorithmConfig(loss_reduction="sequence_mean"), mask)
    # Row 0 is clipped at 1 + 0.2: loss -1.2 on both valid tokens. Row 1: -(1 * -0.5) = 0.5 per token.
    assert_close(loss, torch.tensor([[-1.2, -1.2, 0.0], [0.5, 0.5, 0.5]]))
    assert metrics["ratio_mean"] == pytest.approx((2 * 1.2214028 + 3 * 1.0) / 5)
    assert metrics["clip_frac_high"] == pytest.approx(2 / 5)


def test_gspo_token_gradient_is_sequence_ratio_times_advantage():
    logp, old, adv, mask = _gspo_inputs()
    loss, _ = gspo_policy_loss(logp, old, adv, AlgorithmConfig(loss_reduction="sequence_mean"), mask)
    loss.sum().backward()
    # Row 0 is clipped (no gradient); row 1: d(-rho*A)/dlogp_t = -rho*A = 0.5 on every token.
    assert_close(logp.grad, torch.tensor([[0.0, 0.0, 0.0], [0.5, 0.5, 0.5]]))


def test_gspo_warns_unless_sequence_mean_reduction():
    logp, old, adv, mask = _gspo_inputs()
    with pytest.warns(UserWarning, match="sequence_mean"):
        gspo_policy_loss(logp, old, adv, AlgorithmConfig(loss_reduction="token_mean"), mask)
