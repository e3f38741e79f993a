"""How worker metrics combine: micro-batches into an optimizer step, optimizer steps into an update.

Within one optimizer step every micro-batch metric is an *additive contribution*, already divided by the
mini-batch's normaliser (the loss normaliser, its masked-token count or its row count), so summing the
micro-batches gives the exact mini-batch value whatever the split. Keys ending in ``_min`` / ``_max`` take
the min / max instead.

Across the optimizer steps of one update (``ppo_train``), values are averaged, again except ``_min`` / ``_max``
keys, as upstream SkyRL does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from skyrl_train.algorithms import masked_mean

__all__ = ["combine_micro_metrics", "aggregate_step_metrics", "rollout_train_logprob_diff"]


def combine_micro_metrics(into: dict[str, float], new: dict[str, float]) -> None:
    """Fold one micro-batch's metrics into the step's: sum, or min / max for ``_min`` / ``_max`` keys."""
    for key, value in new.items():
        if key not in into:
            into[key] = value
        elif key.endswith("_min"):
            into[key] = min(into[key], value)
        elif key.endswith("_max"):
            into[key] = max(into[key], value)
        else:
            into[key] += value


def aggregate_step_metrics(steps: Sequence[dict[str, float]]) -> dict[str, float]:
    """One dict for an update: the mean over steps, or the min / max for ``_min`` / ``_max`` keys."""
    out: dict[str, float] = {}
    for key in {k for step in steps for k in step}:
        values = [step[key] for step in steps if key in step]
        if key.endswith("_min"):
            out[key] = min(values)
        elif key.endswith("_max"):
            out[key] = max(values)
        else:
            out[key] = sum(values) / len(values)
    return out


@torch.no_grad()
def rollout_train_logprob_diff(
    rollout_logprobs: torch.Tensor, train_logprobs: torch.Tensor, loss_mask: torch.Tensor
) -> dict[str, float]:
    """``|rollout − trainer|`` logprob gap on loss-masked tokens: ``{"..._mean", "..._std"}`` (upstream names).

    The inference engine and the trainer score the same sampled tokens with the same weights, so the gap should be
    numerical noise (< 1e-3 in fp32). A large gap means the engine's weights or sampling setup (temperature, chat
    template, position ids) differ from the trainer's, and PPO's importance ratios are then off-policy.
    """
    mask = loss_mask.to(train_logprobs.dtype)
    diff = (rollout_logprobs.to(train_logprobs.dtype) - train_logprobs).abs()
    mean = masked_mean(diff, mask)
    var = masked_mean((diff - mean).square(), mask)
    return {
        "rollout_train_logprobs_abs_diff_mean": mean.item(),
        "rollout_train_logprobs_abs_diff_std": var.sqrt().item(),
    }
