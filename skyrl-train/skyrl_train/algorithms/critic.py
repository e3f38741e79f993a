"""Critic (value) loss with value clipping, for PPO with ``gae``."""

from __future__ import annotations

import torch

from skyrl_train.algorithms.masked import masked_mean

__all__ = ["ppo_critic_loss"]


def ppo_critic_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    loss_mask: torch.Tensor | None,
    value_clip: float | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss, per token.

    With ``c = value_clip`` and ``R`` the returns from ``gae``::

        V_clip = V_old + clamp(V − V_old, −c, c)
        loss   = ½ · max((V − R)², (V_clip − R)²) · m          (value_clip set)
        loss   = ½ · (V − R)² · m                              (value_clip None)

    Reduce it with ``reduce_loss(loss, loss_mask, "token_mean", normalizer=...)`` like the policy loss.

    Args:
        values: ``[B, T]`` current critic values (with grad).
        old_values: ``[B, T]`` values when the batch was generated.
        returns: ``[B, T]`` regression targets.
        loss_mask: ``[B, T]`` 0/1, or None for every token.
        value_clip: ``c`` (``trainer.algorithm.value_clip``), or None for no clipping.

    Returns:
        ``(loss [B, T], metrics)``: ``values_clipfrac`` (fraction of tokens where the clipped term is larger)
        and ``values_mean``.
    """
    mask = torch.ones_like(values) if loss_mask is None else loss_mask.to(values.dtype)
    unclipped = (values - returns).square()
    if value_clip is None:
        loss = 0.5 * unclipped
        clipfrac = 0.0
    else:
        clipped_values = old_values + (values - old_values).clamp(-value_clip, value_clip)
        clipped = (clipped_values - returns).square()
        loss = 0.5 * torch.maximum(unclipped, clipped)
        clipfrac = masked_mean((clipped > unclipped).to(mask.dtype), mask).item()
    metrics = {"values_clipfrac": clipfrac, "values_mean": masked_mean(values.detach(), mask).item()}
    return loss * mask, metrics
