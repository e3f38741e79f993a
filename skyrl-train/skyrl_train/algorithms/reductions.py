"""Loss reductions that stay exact when a mini-batch is split into micro-batches.

The worker takes one optimizer step per *mini-batch*, but runs forward/backward on *micro-batches* and
accumulates gradients. The loss we want is the one defined on the whole mini-batch; with ``m`` the loss mask,
``ℓ`` the per-token loss and ``N`` the number of sequences (rows with at least one masked token)::

    token_mean               L = Σ_{i,t} ℓ_{i,t} m_{i,t} / Σ_{i,t} m_{i,t}
    sequence_mean            L = (1/N) Σ_i ( Σ_t ℓ_{i,t} m_{i,t} / Σ_t m_{i,t} )
    seq_mean_token_sum_norm  L = (1/N) Σ_i ( Σ_t ℓ_{i,t} m_{i,t} / max_seq_len )      (Dr.GRPO)

Each is ``Σ_i w_i Σ_t ℓ_{i,t} m_{i,t} / Z``: a per-row weight ``w_i`` (``1/Σ_t m_{i,t}`` for sequence_mean,
1 otherwise) that only depends on the row itself, and one normaliser ``Z`` for the whole mini-batch
(``Σ m``, ``N`` or ``N · max_seq_len``). The sum over rows splits over micro-batches; ``Z`` does not.

Design choice (differs from upstream v0.4): the caller computes ``Z`` once on the mini-batch with
``compute_loss_normalizer`` and passes it to ``reduce_loss`` for every micro-batch, then *sums* the
micro-batch losses (gradient accumulation without dividing by the number of micro-batches). The sum of the
micro-batch losses is then exactly the mini-batch loss. Upstream v0.4 normalises inside each micro-batch and
then averages the micro-batch losses, i.e. a "mean of means" that over-weights tokens of short micro-batches
under token_mean (and miscounts sequences when micro-batches differ in size). Upstream HEAD fixes the same bias
by folding ``Z`` into the advantages; we keep it as an explicit argument so the per-token loss and advantages
stay interpretable and the KL / entropy terms use the very same normaliser. Calling ``reduce_loss`` without
``normalizer`` normalises by the given tensor alone, which is right when it is the whole mini-batch.

Data parallelism: compute ``Z`` over the global mini-batch (all-reduce the counts across ranks). DDP/FSDP
*average* gradients over ranks, so multiply each rank's loss by the world size (or pass ``Z / world_size``).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

import torch

__all__ = ["LossReduction", "compute_loss_normalizer", "reduce_loss"]


class LossReduction(StrEnum):
    """Names of the loss reductions (``trainer.algorithm.loss_reduction``)."""

    TOKEN_MEAN = "token_mean"
    SEQUENCE_MEAN = "sequence_mean"
    SEQ_MEAN_TOKEN_SUM_NORM = "seq_mean_token_sum_norm"


def _parse(loss_reduction: str | LossReduction) -> LossReduction:
    try:
        return LossReduction(str(loss_reduction))
    except ValueError:
        names = ", ".join(r.value for r in LossReduction)
        raise ValueError(f"Unknown loss_reduction {loss_reduction!r}. Available: {names}") from None


def compute_loss_normalizer(
    loss_mask: torch.Tensor | Iterable[torch.Tensor],
    loss_reduction: str | LossReduction,
    max_seq_len: int | None = None,
) -> float:
    """The mini-batch normaliser ``Z`` for ``reduce_loss``.

    ``token_mean``: ``Σ m`` (valid tokens). ``sequence_mean``: ``N`` (rows with ``Σ_t m > 0``).
    ``seq_mean_token_sum_norm``: ``N · max_seq_len``. A normaliser of 0 (nothing to train on) is returned as 1,
    so the loss is 0 rather than NaN.

    Args:
        loss_mask: the mini-batch's ``[B, T]`` loss mask, or the list of its micro-batches' masks (which may
            have different ``T``).
        loss_reduction: one of ``LossReduction``.
        max_seq_len: required for ``seq_mean_token_sum_norm`` (upstream: ``max_input_length +
            max_generate_length``).
    """
    reduction = _parse(loss_reduction)
    masks = [loss_mask] if isinstance(loss_mask, torch.Tensor) else list(loss_mask)
    if reduction is LossReduction.TOKEN_MEAN:
        total = sum(float(m.sum().item()) for m in masks)
    else:
        total = float(sum(int((m.sum(dim=-1) > 0).sum().item()) for m in masks))
        if reduction is LossReduction.SEQ_MEAN_TOKEN_SUM_NORM:
            if max_seq_len is None or max_seq_len <= 0:
                raise ValueError("seq_mean_token_sum_norm needs a positive max_seq_len")
            total *= max_seq_len
    return total if total > 0 else 1.0


def reduce_loss(
    loss: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_reduction: str | LossReduction,
    *,
    normalizer: float | torch.Tensor | None = None,
    max_seq_len: int | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar: ``Σ_i w_i Σ_t ℓ_{i,t} m_{i,t} / Z``.

    ``w_i = 1 / Σ_t m_{i,t}`` for ``sequence_mean`` (0 for an all-masked row), else 1. ``Z = normalizer``,
    computed once per mini-batch with ``compute_loss_normalizer``; summing the results over the micro-batches
    of a mini-batch gives exactly the mini-batch loss. With ``normalizer=None``, ``Z`` is computed from
    ``loss_mask`` (this tensor is treated as the whole mini-batch; ``max_seq_len`` is then needed for
    ``seq_mean_token_sum_norm``).

    Args:
        loss: ``[B, T]`` per-token loss.
        loss_mask: ``[B, T]`` 0/1.
        loss_reduction: one of ``LossReduction``.
        normalizer: the mini-batch's ``Z``.
        max_seq_len: only used when ``normalizer`` is None.

    Returns:
        A scalar tensor (differentiable w.r.t. ``loss``).
    """
    reduction = _parse(loss_reduction)
    if normalizer is None:
        normalizer = compute_loss_normalizer(loss_mask, reduction, max_seq_len)
    mask = loss_mask.to(loss.dtype)
    per_seq = (loss * mask).sum(dim=-1)
    if reduction is LossReduction.SEQUENCE_MEAN:
        per_seq = per_seq / mask.sum(dim=-1).clamp_min(1)
    return per_seq.sum() / normalizer
