"""Calling a registered policy loss, whichever upstream SkyRL version it was written for.

This fork's losses (and upstream's since its loss reductions moved out of the losses) return ``(per_token_loss [B, T],
metrics: dict)``. Losses written for upstream skyrl-train 0.3 differ in two ways, and `call_policy_loss` takes both:

- they reduce the loss themselves and return a 0-dim tensor (e.g. ``(-log_probs * advantages).mean()``; a
  one-element vector counts as one): the worker
  then uses it as the micro-batch's loss (`PolicyLoss.reduced`), weighted by the micro-batch's share of the
  mini-batch's rows, which is upstream's mean of micro-batch losses when the micro-batches are equal;
- they return the clip ratio as a bare float instead of a metrics dict: it becomes ``{"clip_ratio": value}``.

Some also lack the ``rollout_logprobs`` parameter (added upstream later): it is passed only to a loss that takes it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

__all__ = ["PolicyLoss", "call_policy_loss"]


class PolicyLoss(NamedTuple):
    loss: torch.Tensor
    """``[B, T]`` per-token loss, or the 0-dim loss of a function that reduced it itself (`reduced`)."""
    metrics: dict[str, float]

    @property
    def reduced(self) -> bool:
        return self.loss.dim() == 0


def call_policy_loss(
    fn: Callable[..., Any],
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    config: Any,
    loss_mask: torch.Tensor,
    rollout_logprobs: torch.Tensor | None,
) -> PolicyLoss:
    """``fn(log_probs, old_log_probs, advantages, config=..., loss_mask=..., [rollout_logprobs=...])`` as a
    `PolicyLoss` (see the module docstring)."""
    kwargs: dict[str, Any] = {"config": config, "loss_mask": loss_mask}
    if _takes(fn, "rollout_logprobs"):
        kwargs["rollout_logprobs"] = rollout_logprobs
    loss, metrics = fn(log_probs, old_log_probs, advantages, **kwargs)
    if loss.shape == (1,):  # a reduced loss kept as a one-element vector
        loss = loss.reshape(())
    if not isinstance(metrics, dict):
        metrics = {"clip_ratio": float(metrics)}
    return PolicyLoss(loss, metrics)


def _takes(fn: Callable[..., Any], name: str) -> bool:
    params = inspect.signature(fn).parameters.values()
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
