"""Off-policy correction of the policy loss: truncated importance sampling (TIS) and ratio-based rejection masks.

The tokens of a batch were sampled by the inference engine, whose logprobs (``rollout_logprobs``) can differ from
the trainer's for the same weights (vLLM in bf16 against the trainer in fp32, a quantised engine, stale weights).
PPO's ratio is taken against the trainer's old logprobs, so the loss is corrected with the per-token importance
ratio of the old policy over the sampling policy::

    is_t = exp(clamp(old_t − rollout_t, −20, 20))

``trainer.algorithm.off_policy_correction`` (upstream SkyRL's keys and semantics) turns on, independently:

- the outlier mask (``outlier_token_is_threshold_low`` / ``_high``, each optional): a row in which any loss token has
  ``is_t < low`` or ``is_t > high`` is dropped whole;
- TIS (``tis_ratio_type``): ``token`` weights token t by ``min(is_t, token_tis_ratio_clip_high)``; ``sequence``
  weights every token of row i by ``min(exp(Σ_t m_t log is_t), sequence_tis_ratio_clip_high)``. The weight is
  detached and multiplies the per-token loss;
- the sequence mask (``sequence_mask_metric``): ``geometric`` keeps row i if ``exp(mean_t log is_t)`` lies in
  ``[geo_mask_low, geo_mask_high]``, ``product`` if ``exp(Σ_t log is_t)`` lies in ``[product_mask_low,
  product_mask_high]``; a row outside is dropped.

``correction_factor`` returns one ``[B, T]`` factor (TIS weight times the kept-row mask) that the policy worker
multiplies into the per-token loss of whatever policy loss is configured. A dropped row thus contributes zero loss
but stays in the loss normaliser, which is computed per mini-batch before the forward pass (upstream HEAD
normalises before the correction too). Bounds are inclusive: a value equal to a bound is kept, and a TIS weight is
counted as capped only when the ratio is strictly above its cap.

Metrics (upstream names) are defined on the batch's loss mask as given, each rule on its own (a row the outlier
mask drops still counts in the TIS and sequence-mask statistics); "rows" are rows with at least one loss token:

- ``is_ratio_mean`` / ``is_ratio_std`` (population) / ``is_ratio_min`` / ``is_ratio_max``: ``is_t`` over loss tokens;
- ``tis_token_clip_high_ratio``: fraction of loss tokens with ``is_t`` above the token cap (token TIS);
- ``tis_seq_clip_high_ratio``: fraction of rows whose sequence ratio is above the sequence cap (sequence TIS);
- ``outlier_seq_masked_ratio``, ``outlier_seq_over_high_ratio``, ``outlier_seq_under_low_ratio``: fraction of rows
  dropped by the outlier mask, with a token above the high / below the low threshold;
- ``geo_sequence_mask_masked_ratio`` / ``_over_high_ratio`` / ``_under_low_ratio`` and the same with
  ``product_sequence_mask_``: fraction of rows the sequence mask drops, above its high / below its low bound.

``OffPolicyStats`` keeps them as sums over tokens and rows plus the counts, so micro-batches and data-parallel
ranks add up to the exact mini-batch values.

Where this differs from upstream SkyRL (same keys, rules and metric names): the correction is applied by the policy
worker to whatever policy loss is configured, custom ones included (upstream calls it inside each built-in loss);
a batch without rollout logprobs is refused while a rule is on (upstream skips the correction without a word); the
ratio statistics are over loss tokens only (upstream's ``is_ratio_min`` / ``_max`` / ``_std`` also count padding as
zeros), and the later rules' fractions are not restricted to rows the outlier mask kept.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, NamedTuple

import torch

from skyrl_train.algorithms.policy_losses import LOG_RATIO_CLAMP

if TYPE_CHECKING:
    from skyrl_train.config.schema import OffPolicyCorrectionConfig

__all__ = [
    "OffPolicyCorrection",
    "OffPolicyStats",
    "correction_factor",
    "finalize_is_ratio_std",
]


@dataclasses.dataclass
class OffPolicyStats:
    """The correction's statistics over one batch as sums, so that batches combine exactly.

    ``token_sums`` are divided by ``num_tokens`` (loss tokens) and ``row_sums`` by ``num_rows`` (rows with a loss
    token); ``is_ratio_sq_dev`` is ``Σ (is_t − 1)²``, from which the std is derived. ``extremes`` holds the
    ``is_ratio_min`` / ``is_ratio_max`` values (absent when the batch has no loss token).
    """

    num_tokens: float
    num_rows: float
    token_sums: dict[str, float]
    row_sums: dict[str, float]
    extremes: dict[str, float]

    def shares(self, num_tokens: float, num_rows: float) -> dict[str, float]:
        """This batch's additive share of the metrics of a larger batch with ``num_tokens`` loss tokens and
        ``num_rows`` rows with a loss token (the extremes as they are); ``finalize_is_ratio_std`` on the sum of the
        shares gives the larger batch's metrics."""
        out = dict(self.extremes)
        out.update({key: value / num_tokens for key, value in self.token_sums.items()})
        out.update({key: value / num_rows for key, value in self.row_sums.items()})
        return out

    def summary(self) -> dict[str, float]:
        """The metric values of this batch alone (see the module docstring)."""
        out = self.shares(max(self.num_tokens, 1.0), max(self.num_rows, 1.0))
        finalize_is_ratio_std(out)
        return out


def finalize_is_ratio_std(metrics: dict[str, float], prefix: str = "") -> None:
    """Replace the mean ``(is_t − 1)²`` (``<prefix>is_ratio_sq_dev``) in ``metrics`` by ``<prefix>is_ratio_std``:
    ``Var = E[(r − 1)²] − (E[r] − 1)²``, centred on 1 so that ratios of exactly 1 give exactly 0."""
    if f"{prefix}is_ratio_sq_dev" in metrics:
        sq_dev = metrics.pop(f"{prefix}is_ratio_sq_dev")
        mean = metrics[f"{prefix}is_ratio_mean"]
        metrics[f"{prefix}is_ratio_std"] = math.sqrt(max(sq_dev - (mean - 1.0) ** 2, 0.0))


class OffPolicyCorrection(NamedTuple):
    factor: torch.Tensor
    """``[B, T]``, detached: the TIS weight times the kept-row mask; multiply the per-token loss by it."""
    stats: OffPolicyStats


@torch.no_grad()
def correction_factor(
    old_log_probs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
    config: OffPolicyCorrectionConfig,
) -> OffPolicyCorrection:
    """The loss factor and statistics of the rules ``config`` turns on (see the module docstring).

    Args:
        old_log_probs: ``[B, T]`` the trainer's logprobs of the sampled tokens before the update.
        rollout_logprobs: ``[B, T]`` the inference engine's logprobs of the same tokens.
        loss_mask: ``[B, T]`` 0/1.
        config: ``trainer.algorithm.off_policy_correction``.
    """
    mask = loss_mask > 0
    log_ratio = torch.where(mask, old_log_probs - rollout_logprobs, 0.0).double()
    ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
    rows = mask.any(dim=-1)
    seq_log_ratio = log_ratio.sum(dim=-1)
    token_sums = {"is_ratio_mean": ratio[mask].sum().item(), "is_ratio_sq_dev": (ratio[mask] - 1).square().sum().item()}
    row_sums: dict[str, float] = {}
    extremes = {}
    if mask.any():
        extremes = {"is_ratio_min": ratio[mask].min().item(), "is_ratio_max": ratio[mask].max().item()}

    factor = torch.ones_like(ratio)
    keep = torch.ones_like(rows)
    low, high = config.outlier_token_is_threshold_low, config.outlier_token_is_threshold_high
    if low is not None or high is not None:
        over = ((ratio > high) & mask).any(dim=-1) if high is not None else torch.zeros_like(rows)
        under = ((ratio < low) & mask).any(dim=-1) if low is not None else torch.zeros_like(rows)
        keep &= ~(over | under)
        _count_rows(row_sums, "outlier_seq", over, under)
    if config.tis_ratio_type == "token":
        cap = config.token_tis_ratio_clip_high
        factor = ratio.clamp(max=cap)
        token_sums["tis_token_clip_high_ratio"] = ((ratio > cap) & mask).sum().item()
    elif config.tis_ratio_type == "sequence":
        cap = config.sequence_tis_ratio_clip_high
        seq_ratio = seq_log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
        factor = seq_ratio.clamp(max=cap).unsqueeze(-1).expand_as(ratio)
        row_sums["tis_seq_clip_high_ratio"] = ((seq_ratio > cap) & rows).sum().item()
    elif config.tis_ratio_type is not None:
        raise ValueError(f"Unknown off_policy_correction.tis_ratio_type {config.tis_ratio_type!r}: token or sequence")
    metric = config.sequence_mask_metric
    if metric is not None:
        if metric == "geometric":
            log_value = seq_log_ratio / mask.sum(dim=-1).clamp_min(1)
            bounds = (config.geo_mask_low, config.geo_mask_high)
            name = "geo_sequence_mask"
        elif metric == "product":
            log_value = seq_log_ratio
            bounds = (config.product_mask_low, config.product_mask_high)
            name = "product_sequence_mask"
        else:
            raise ValueError(f"Unknown off_policy_correction.sequence_mask_metric {metric!r}: geometric or product")
        value = log_value.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
        over, under = (value > bounds[1]) & rows, (value < bounds[0]) & rows
        keep &= ~(over | under)
        _count_rows(row_sums, name, over, under)
    factor = (factor * keep.unsqueeze(-1)).to(old_log_probs.dtype)
    stats = OffPolicyStats(float(mask.sum()), float(rows.sum()), token_sums, row_sums, extremes)
    return OffPolicyCorrection(factor, stats)


def _count_rows(row_sums: dict[str, float], name: str, over: torch.Tensor, under: torch.Tensor) -> None:
    row_sums[f"{name}_masked_ratio"] = (over | under).sum().item()
    row_sums[f"{name}_over_high_ratio"] = over.sum().item()
    row_sums[f"{name}_under_low_ratio"] = under.sum().item()
