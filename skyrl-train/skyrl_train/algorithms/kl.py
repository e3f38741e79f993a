"""KL estimators between the policy and the reference model, and KL coefficient controllers.

``Δ = logp − logp_ref`` per sampled token (``[B, T]``). Estimators of ``KL(π ‖ π_ref)`` from samples of π:

- ``k1``:  ``Δ``                                   (unbiased, high variance, can be negative)
- ``abs``: ``|Δ|``
- ``k2``:  ``½ Δ²``
- ``k3``:  ``exp(δ) − δ − 1`` with ``δ = clamp(−Δ, −20, 20)``, then clamped to ``[−10, 10]`` (non-negative,
  low variance; verl calls it ``low_var_kl``)

Two uses:

- in the loss (``use_kl_loss``): ``kl_loss_coef · reduce_loss(compute_approx_kl(...), loss_mask, reduction)``;
- in the reward (``use_kl_in_reward``): ``apply_kl_penalty`` subtracts ``β · kl`` per token, with ``β`` from a
  ``FixedKLController`` or ``AdaptiveKLController``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

import torch

from skyrl_train.algorithms.masked import masked_mean

if TYPE_CHECKING:
    from skyrl_train.config.schema import AlgorithmConfig

__all__ = [
    "KLEstimator",
    "K3_EXP_CLAMP",
    "K3_RESULT_CLAMP",
    "compute_approx_kl",
    "apply_kl_penalty",
    "FixedKLController",
    "AdaptiveKLController",
    "get_kl_controller",
]

K3_EXP_CLAMP = 20.0
"""``k3`` clamps the log-ratio to ``±20`` before ``exp``."""

K3_RESULT_CLAMP = 10.0
"""``k3`` clamps its result to ``[−10, 10]``."""


class KLEstimator(StrEnum):
    """Names of the KL estimators (``trainer.algorithm.kl_estimator_type``)."""

    K1 = "k1"
    K2 = "k2"
    K3 = "k3"
    ABS = "abs"


def compute_approx_kl(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    loss_mask: torch.Tensor | None,
    kl_estimator_type: str | KLEstimator,
) -> torch.Tensor:
    """Per-token KL estimate ``[B, T]`` (zero where ``loss_mask`` is 0; no mask if None); formulas in the module
    docstring. ``kl_estimator_type`` is ``trainer.algorithm.kl_estimator_type``."""
    try:
        kind = KLEstimator(str(kl_estimator_type))
    except ValueError:
        names = ", ".join(k.value for k in KLEstimator)
        raise ValueError(f"Unknown kl_estimator_type {kl_estimator_type!r}. Available: {names}") from None
    delta = log_probs - ref_log_probs
    if kind is KLEstimator.K1:
        kl = delta
    elif kind is KLEstimator.ABS:
        kl = delta.abs()
    elif kind is KLEstimator.K2:
        kl = 0.5 * delta.square()
    else:
        d = (-delta).clamp(-K3_EXP_CLAMP, K3_EXP_CLAMP)
        kl = (torch.exp(d) - d - 1.0).clamp(-K3_RESULT_CLAMP, K3_RESULT_CLAMP)
    if loss_mask is not None:
        kl = kl * loss_mask.to(kl.dtype)
    return kl


def apply_kl_penalty(
    token_level_rewards: torch.Tensor,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    loss_mask: torch.Tensor,
    kl_coef: float,
    kl_estimator_type: str | KLEstimator,
) -> tuple[torch.Tensor, float]:
    """KL in the reward: ``r'_{i,t} = r_{i,t} − β · kl_{i,t} · m_{i,t}``, ``m`` the loss mask (the tokens the policy
    sampled; not tool results, whose logprobs the trainer does not compute).

    Returns:
        ``(penalised rewards [B, T], current_kl)`` where ``current_kl`` is the mean over the sequences ``S`` with a
        masked token of each one's masked mean KL, ``(1/|S|) Σ_{i∈S} (Σ_t kl_{i,t} m_{i,t} / Σ_t m_{i,t})`` (0 when
        ``S`` is empty; rows the zero-variance filter dropped have none); feed it to the controller's ``update``.
    """
    mask = loss_mask.to(log_probs.dtype)
    kl = compute_approx_kl(log_probs, ref_log_probs, mask, kl_estimator_type).detach()
    rewards = token_level_rewards - kl_coef * kl
    rows = mask.sum(dim=-1) > 0
    current_kl = masked_mean(kl, mask, dim=-1)[rows].mean().item() if bool(rows.any()) else 0.0
    return rewards, current_kl


class FixedKLController:
    """A constant KL coefficient ``β``; ``update`` does nothing."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op (the coefficient is fixed)."""


class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al., 2019), steering the observed KL towards ``kl_target``.

    ``update(current_kl, n_steps)``::

        e = clip(current_kl / kl_target − 1, −0.2, 0.2)
        β ← β · (1 + e · n_steps / horizon)
    """

    ERROR_CLIP = 0.2

    def __init__(self, init_kl_coef: float, kl_target: float, horizon: int) -> None:
        if kl_target <= 0:
            raise ValueError(f"kl_target must be > 0, got {kl_target}")
        if horizon <= 0:
            raise ValueError(f"horizon must be > 0, got {horizon}")
        self.value = float(init_kl_coef)
        self.kl_target = float(kl_target)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move ``β`` by at most ±20 %·``n_steps/horizon`` towards the target (see the class docstring)."""
        error = min(max(current_kl / self.kl_target - 1.0, -self.ERROR_CLIP), self.ERROR_CLIP)
        self.value *= 1.0 + error * n_steps / self.horizon


def get_kl_controller(algorithm_config: AlgorithmConfig) -> FixedKLController | AdaptiveKLController:
    """Build the controller of ``trainer.algorithm.kl_ctrl``.

    ``kl_ctrl.type`` is ``fixed`` or ``adaptive`` (which also reads ``kl_ctrl.kl_target`` and ``kl_ctrl.horizon``);
    the initial coefficient is ``kl_loss_coef``, as upstream.
    """
    kl_ctrl = algorithm_config.kl_ctrl
    coef = algorithm_config.kl_loss_coef
    if kl_ctrl.type == "fixed":
        return FixedKLController(coef)
    if kl_ctrl.type == "adaptive":
        return AdaptiveKLController(coef, kl_ctrl.kl_target, kl_ctrl.horizon)
    raise ValueError(f"Unknown kl_ctrl.type {kl_ctrl.type!r}. Available: fixed, adaptive")
