"""Masked tensor statistics and group-id helpers shared by the RL algorithms.

Every function here takes ``values`` and a 0/1 ``mask`` of the same shape (or broadcastable to it).
An empty mask never produces NaN in ``masked_sum`` / ``masked_mean``: the mean of nothing is 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

__all__ = ["masked_sum", "masked_mean", "masked_var", "masked_whiten", "group_ids_from_index"]


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of the masked entries: ``Σ values·mask`` (over ``dim``, or over everything if ``dim`` is None)."""
    prod = values * mask
    return prod.sum() if dim is None else prod.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of the masked entries: ``Σ values·mask / Σ mask``; 0 where the mask is empty."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / count.clamp_min(1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over all masked entries (a scalar).

    ``var = Σ mask·(x − μ)² / (Σ mask − 1)`` with ``μ = masked_mean(x)`` (unbiased), or ``/ Σ mask`` if not.

    Raises:
        ValueError: if the mask is empty, or holds a single entry and ``unbiased`` is set.
    """
    count = mask.sum()
    if count == 0:
        raise ValueError("masked_var: the mask selects no entries")
    mean = masked_mean(values, mask)
    sq = masked_sum((values - mean) ** 2, mask)
    if unbiased:
        if count == 1:
            raise ValueError("masked_var: the unbiased variance needs at least 2 masked entries")
        return sq / (count - 1)
    return sq / count


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Whiten ``values`` with the statistics of the masked entries: ``(x − μ) / sqrt(var + eps)``.

    ``μ`` is the masked mean and ``var`` the unbiased masked variance (see ``masked_var``). The result is
    defined everywhere (also on unmasked entries); callers multiply by the mask afterwards.
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask, unbiased=True)
    return (values - mean) * torch.rsqrt(var + eps)


def group_ids_from_index(index: Sequence[Hashable] | torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """Map per-sample group keys (uids) to dense group ids ``0..G-1``, shape ``[B]`` (int64).

    ``index`` is either a sequence of hashables (e.g. the prompt uid strings of each sample) or a 1-D tensor.
    Ids are assigned in order of first appearance, so ``["b", "a", "b"] -> [0, 1, 0]``.
    """
    if isinstance(index, torch.Tensor):
        if index.dim() != 1:
            raise ValueError(f"index must be 1-D, got shape {tuple(index.shape)}")
        keys: list[Hashable] = index.tolist()
    else:
        keys = list(index)
    seen: dict[Hashable, int] = {}
    ids = [seen.setdefault(k, len(seen)) for k in keys]
    return torch.tensor(ids, dtype=torch.long, device=device)
