"""Policy losses: ``regular`` (PPO clip, asymmetric), ``dual_clip``, ``gspo`` and ``cross_entropy`` (SFT).

Every loss has upstream SkyRL's signature ``fn(log_probs, old_log_probs, advantages, config, loss_mask=None,
rollout_logprobs=None) -> (per_token_loss, metrics)``:

- ``log_probs``: ``[B, T]`` log-probabilities of the sampled tokens under the current policy (with grad; the trainer
  computes them where ``loss_mask`` is 1 and passes 0 elsewhere);
- ``old_log_probs``: ``[B, T]`` the same under the policy that generated the batch (no grad);
- ``advantages``: ``[B, T]``;
- ``config``: the ``trainer.algorithm`` section (``AlgorithmConfig``); the losses read ``eps_clip_low``,
  ``eps_clip_high``, ``clip_ratio_c`` and ``loss_reduction``;
- ``loss_mask``: ``[B, T]`` 0/1, 1 on tokens the model sampled (None: every token);
- ``rollout_logprobs``: ``[B, T]`` the inference engine's logprobs of the sampled tokens, or None. The built-in
  losses do not read them: the policy worker applies ``trainer.algorithm.off_policy_correction`` to the per-token
  loss that any policy loss returns (``skyrl_train.algorithms.off_policy``), so a loss must not apply it again.

The per-token loss is zero where ``loss_mask`` is 0. Reduce it with ``reduce_loss`` (reductions module).
``metrics`` are Python floats over the masked tokens of the given batch:

- ``clip_ratio``: fraction of tokens where the clipped surrogate is the one used (``clip_frac_low +
  clip_frac_high``);
- ``clip_frac_low``: ``A < 0`` and ``ratio < 1 − eps_clip_low``; ``clip_frac_high``: ``A > 0`` and
  ``ratio > 1 + eps_clip_high``;
- ``ratio_mean`` / ``ratio_min`` / ``ratio_max``: importance ratio statistics;
- ``ppo_kl``: masked mean of ``old_log_probs − log_probs``;
- ``dual_clip_frac`` (dual_clip only): fraction of tokens capped by ``clip_ratio_c · |A|``.

``cross_entropy`` is supervised fine-tuning's loss, ``−logp`` on every loss-masked token; it reads neither the old
logprobs nor the advantages and reports no metrics. Upstream sums it and ignores ``loss_reduction``; here it is
reduced like every policy loss (``reduce_loss``), and the SFT step (``PolicyWorker.sft_train``) always uses
``token_mean``: the mean over the mini-batch's loss tokens, the normalisation TRL's SFT uses, exact across
micro-batches and data-parallel ranks.
"""

from __future__ import annotations

import warnings
from enum import StrEnum
from typing import TYPE_CHECKING

import torch

from skyrl_train.algorithms.masked import masked_mean
from skyrl_train.config.registries import PolicyLossRegistry

if TYPE_CHECKING:
    from skyrl_train.config.schema import AlgorithmConfig

__all__ = [
    "PolicyLossType",
    "LOG_RATIO_CLAMP",
    "GSPO_LOG_RATIO_MAX",
    "ppo_policy_loss",
    "dual_clip_policy_loss",
    "gspo_policy_loss",
    "cross_entropy_loss",
]

LOG_RATIO_CLAMP = 20.0
"""``log_probs − old_log_probs`` is clamped to ``±20`` before ``exp`` so the ratio never overflows."""

GSPO_LOG_RATIO_MAX = 10.0
"""GSPO clamps the token log-weight to ``≤ 10``."""


class PolicyLossType(StrEnum):
    """Names of the built-in policy losses (``trainer.algorithm.policy_loss_type``)."""

    REGULAR = "regular"
    DUAL_CLIP = "dual_clip"
    GSPO = "gspo"
    CROSS_ENTROPY = "cross_entropy"


def _as_mask(loss_mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(like) if loss_mask is None else loss_mask.to(like.dtype)


def _clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``−min(ρA, clip(ρ, 1−ε_low, 1+ε_high)·A)`` per token, plus the low/high clip indicators."""
    unclipped = -ratio * advantages
    clipped = -ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * advantages
    loss = torch.maximum(unclipped, clipped)
    with torch.no_grad():
        used_clip = clipped > unclipped
        clip_low = used_clip & (advantages < 0)
        clip_high = used_clip & (advantages > 0)
    return loss, clip_low, clip_high


def _metrics(
    ratio: torch.Tensor,
    log_ratio: torch.Tensor,
    clip_low: torch.Tensor,
    clip_high: torch.Tensor,
    mask: torch.Tensor,
) -> dict[str, float]:
    with torch.no_grad():
        valid = mask > 0
        r = ratio.detach()
        frac_low = masked_mean(clip_low.to(mask.dtype), mask).item()
        frac_high = masked_mean(clip_high.to(mask.dtype), mask).item()
        any_valid = bool(valid.any())
        return {
            "clip_ratio": frac_low + frac_high,
            "clip_frac_low": frac_low,
            "clip_frac_high": frac_high,
            "ratio_mean": masked_mean(r, mask).item(),
            "ratio_min": r[valid].min().item() if any_valid else 0.0,
            "ratio_max": r[valid].max().item() if any_valid else 0.0,
            "ppo_kl": masked_mean(-log_ratio.detach(), mask).item(),
        }


def ppo_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    config: AlgorithmConfig,
    loss_mask: torch.Tensor | None = None,
    rollout_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with asymmetric clipping ("clip-higher").

    Per token, with ``ρ = exp(clamp(logp − logp_old, −20, 20))``::

        loss = −min(ρ · A, clip(ρ, 1 − ε_low, 1 + ε_high) · A) · m

    ``ε_low = config.eps_clip_low``, ``ε_high = config.eps_clip_high``. The clip binds from below
    only for ``A < 0`` (``ρ < 1 − ε_low``) and from above only for ``A > 0`` (``ρ > 1 + ε_high``); there the
    gradient is 0.

    Returns:
        ``(loss [B, T], metrics)``; see the module docstring for the metric keys.
    """
    mask = _as_mask(loss_mask, log_probs)
    log_ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss, clip_low, clip_high = _clipped_surrogate(ratio, advantages, config.eps_clip_low, config.eps_clip_high)
    return loss * mask, _metrics(ratio, log_ratio, clip_low, clip_high, mask)


def dual_clip_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    config: AlgorithmConfig,
    loss_mask: torch.Tensor | None = None,
    rollout_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Dual-clip PPO: the ``regular`` loss, additionally capped for negative advantages.

    With ``L`` the ``regular`` per-token loss and ``c = config.clip_ratio_c`` (must be > 1)::

        loss = min(L, −c · A) · m    where A < 0
        loss = L · m                 where A ≥ 0

    For ``A < 0`` a very large ratio would make ``L = −ρA`` unbounded; the cap keeps it at ``c·|A|`` (zero
    gradient there).

    Returns:
        ``(loss [B, T], metrics)``; metrics add ``dual_clip_frac``.
    """
    clip_c = config.clip_ratio_c
    if clip_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for dual_clip, got {clip_c}")
    mask = _as_mask(loss_mask, log_probs)
    log_ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss, clip_low, clip_high = _clipped_surrogate(ratio, advantages, config.eps_clip_low, config.eps_clip_high)
    cap = -clip_c * advantages
    negative = advantages < 0
    dual = negative & (loss > cap)
    loss = torch.where(negative, torch.minimum(loss, cap), loss)
    metrics = _metrics(ratio, log_ratio, clip_low, clip_high, mask)
    metrics["dual_clip_frac"] = masked_mean(dual.to(mask.dtype), mask).item()
    return loss * mask, metrics


def gspo_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    config: AlgorithmConfig,
    loss_mask: torch.Tensor | None = None,
    rollout_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO (the GSPO-token form): PPO clipping on a sequence-level importance ratio.

    The sequence ratio is the geometric mean of the token ratios::

        s_i = (1/|y_i|) Σ_t m_{i,t} · (logp_{i,t} − logp_old_{i,t})          (log of the sequence ratio)
        w_{i,t} = logp_{i,t} − sg(logp_{i,t}) + sg(s_i),  clamped to ≤ 10   (sg = stop-gradient)
        ρ_{i,t} = exp(w_{i,t})      (value exp(s_i) on every token; ∂ρ/∂logp_{i,t} = ρ_{i,t})
        loss_{i,t} = −min(ρ·A, clip(ρ, 1 − ε_low, 1 + ε_high)·A) · m

    so every token of a sequence is clipped together. Upstream recommends ``loss_reduction=sequence_mean``;
    a warning is emitted for any other ``config.loss_reduction``.

    Returns:
        ``(loss [B, T], metrics)``; ratio statistics are over the sequence ratios broadcast to tokens.
    """
    if config.loss_reduction != "sequence_mean":
        warnings.warn(f"gspo is meant for loss_reduction='sequence_mean', got {config.loss_reduction!r}", stacklevel=2)
    mask = _as_mask(loss_mask, log_probs)
    token_log_ratio = log_probs - old_log_probs
    seq_log_ratio = masked_mean(token_log_ratio, mask, dim=-1)
    log_weight = log_probs - log_probs.detach() + seq_log_ratio.detach().unsqueeze(-1)
    log_weight = log_weight.clamp(max=GSPO_LOG_RATIO_MAX)
    ratio = torch.exp(log_weight)
    loss, clip_low, clip_high = _clipped_surrogate(ratio, advantages, config.eps_clip_low, config.eps_clip_high)
    return loss * mask, _metrics(ratio, token_log_ratio, clip_low, clip_high, mask)


def cross_entropy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    config: AlgorithmConfig,
    loss_mask: torch.Tensor | None = None,
    rollout_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Negative log-likelihood of the target tokens (SFT)::

        loss = −logp · m

    ``old_log_probs``, ``advantages`` and ``rollout_logprobs`` are not read (upstream's signature). Keeps the dtype
    of ``log_probs``.

    Returns:
        ``(loss [B, T], {})``.
    """
    return -log_probs * _as_mask(loss_mask, log_probs), {}


PolicyLossRegistry.register(PolicyLossType.REGULAR.value, ppo_policy_loss)
PolicyLossRegistry.register(PolicyLossType.DUAL_CLIP.value, dual_clip_policy_loss)
PolicyLossRegistry.register(PolicyLossType.GSPO.value, gspo_policy_loss)
PolicyLossRegistry.register(PolicyLossType.CROSS_ENTROPY.value, cross_entropy_loss)
