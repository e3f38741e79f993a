"""Advantage estimators: ``grpo``, ``rloo``, ``reinforce++``, ``gae``; and the zero-variance filter.

Shapes: ``B`` samples (rows), ``T`` response tokens. ``token_level_rewards`` and ``response_mask`` are
``[B, T]``; ``index`` holds one group key per row (the prompt uid: samples of the same prompt form a group).
Each estimator returns ``(advantages, returns)``, both ``[B, T]`` and zero where ``response_mask`` is 0.

``response_mask`` should be the *response* mask (1 on every non-padding response token). For right-padded
responses this is contiguous, and ``reinforce++`` / ``gae`` are then the textbook recursions.

Excluding samples from the baseline (``baseline_mask``)
-------------------------------------------------------
Infrastructure failures (an env that failed to initialise, a tool server crash, a trajectory timeout) say
nothing about the policy. (An empty generation is not one of them: it is the policy's own answer, scored and
trained on like any other.) Scoring them as reward 0 would drag down the group mean and
inflate the std, changing the advantage of every *healthy* sample in the group. Every estimator therefore
takes an optional boolean ``baseline_mask`` of shape ``[B]``: ``True`` = a regular sample, ``False`` = an
excluded sample. Excluded samples

- do not enter any statistic: group counts, means and stds (grpo, rloo) or the batch whitening (reinforce++,
  gae);
- get advantage 0 and returns 0 on every token, so they contribute no policy gradient.

Group sizes are counted over included samples only, so a group left with one included sample is treated as a
singleton (grpo: mean 0, std 1; rloo: advantage 0). The caller should also zero the loss mask of excluded rows
so that they do not count in the ``token_mean`` denominator either. ``baseline_mask=None`` includes everyone.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Sequence
from enum import StrEnum
from typing import Any

import torch

from skyrl_train.algorithms.masked import group_ids_from_index, masked_whiten
from skyrl_train.config.registries import AdvantageEstimatorRegistry

__all__ = [
    "AdvantageEstimator",
    "GRPO_EPSILON",
    "compute_grpo_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_gae_advantage_return",
    "compute_advantages_and_returns",
    "compute_zero_variance_mask",
    "compute_step_wise_advantages",
    "normalize_advantages_over_batch",
    "trajectory_index",
    "trajectory_sums",
]

GRPO_EPSILON = 1e-6
"""Added to the group std in GRPO's normalisation: ``(score − mean) / (std + 1e-6)``."""


class AdvantageEstimator(StrEnum):
    """Names of the built-in advantage estimators (``trainer.algorithm.advantage_estimator``)."""

    GRPO = "grpo"
    RLOO = "rloo"
    REINFORCE_PP = "reinforce++"
    GAE = "gae"


Index = Sequence[Hashable] | torch.Tensor


def _include_mask(baseline_mask: torch.Tensor | None, batch_size: int, device: torch.device) -> torch.Tensor:
    """Boolean ``[B]``: which samples take part in the baseline (all of them if ``baseline_mask`` is None)."""
    if baseline_mask is None:
        return torch.ones(batch_size, dtype=torch.bool, device=device)
    include = torch.as_tensor(baseline_mask, device=device).bool()
    if include.shape != (batch_size,):
        raise ValueError(f"baseline_mask must have shape [{batch_size}], got {tuple(include.shape)}")
    return include


def _group_stats(
    scores: torch.Tensor, index: Index, include: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group mean, unbiased group std and group size ``[B]``, over included samples only.

    ``mean_g = Σ_{i∈g, incl} s_i / n_g``; ``std_g = sqrt(Σ_{i∈g, incl} (s_i − mean_g)² / (n_g − 1))``.
    Groups with ``n_g ≤ 1`` get mean 0 and std 1 (upstream's singleton convention).
    """
    gids = group_ids_from_index(index, device=scores.device)
    if gids.shape[0] != scores.shape[0]:
        raise ValueError(f"index has {gids.shape[0]} entries but the batch has {scores.shape[0]} rows")
    n_groups = int(gids.max().item()) + 1 if gids.numel() else 0
    inc = include.to(scores.dtype)
    count = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device).scatter_add(0, gids, inc)
    total = torch.zeros_like(count).scatter_add(0, gids, scores * inc)
    mean = total / count.clamp_min(1)
    sq_dev = torch.zeros_like(count).scatter_add(0, gids, (scores - mean[gids]) ** 2 * inc)
    std = (sq_dev / (count - 1).clamp_min(1)).sqrt()
    singleton = count <= 1
    mean = torch.where(singleton, torch.zeros_like(mean), mean)
    std = torch.where(singleton, torch.ones_like(std), std)
    return mean[gids], std[gids], count[gids]


def compute_grpo_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Index,
    grpo_norm_by_std: bool = True,
    epsilon: float = GRPO_EPSILON,
    baseline_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: outcome score relative to the other samples of the same prompt.

    With ``s_i = Σ_t r_{i,t}`` (the sum over all ``T`` positions), and ``μ_g``, ``σ_g`` the mean and unbiased std
    of the scores in sample ``i``'s group ``g``::

        A_i = (s_i − μ_g) / (σ_g + ε)     if grpo_norm_by_std   (ε = 1e-6)
        A_i =  s_i − μ_g                  otherwise             (Dr.GRPO)

    A group with a single (included) sample uses ``μ = 0, σ = 1``, i.e. ``A_i = s_i / (1 + ε)`` or ``s_i``.
    ``A_i`` is broadcast over the response: ``advantages[i, t] = A_i · response_mask[i, t]``; returns = advantages.
    Samples with ``baseline_mask[i] == False`` are left out of ``μ_g``/``σ_g`` and get 0 (see module docstring).

    Args:
        token_level_rewards: ``[B, T]`` rewards.
        response_mask: ``[B, T]`` 0/1 mask of response tokens.
        index: ``B`` group keys (prompt uids).
        grpo_norm_by_std: divide by the group std.
        epsilon: added to the std.
        baseline_mask: optional ``[B]`` bool, False = excluded sample.

    Returns:
        ``(advantages, returns)``, both ``[B, T]``.
    """
    scores = token_level_rewards.sum(dim=-1)
    include = _include_mask(baseline_mask, scores.shape[0], scores.device)
    mean, std, _ = _group_stats(scores, index, include)
    adv = scores - mean
    if grpo_norm_by_std:
        adv = adv / (std + epsilon)
    adv = torch.where(include, adv, torch.zeros_like(adv))
    advantages = adv.unsqueeze(-1) * response_mask
    return advantages, advantages.clone()


def compute_rloo_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Index,
    baseline_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: outcome score minus the mean score of the *other* samples of the same prompt.

    With ``s_i = Σ_t r_{i,t}``, group size ``n`` and group mean ``μ_g``::

        A_i = s_i − (1/(n−1)) Σ_{j≠i} s_j  =  (s_i − μ_g) · n / (n − 1)

    A group with a single (included) sample has no baseline: ``A_i = 0`` (with a warning).
    Broadcast over the response as in GRPO; returns = advantages. ``baseline_mask`` as in the module docstring.

    Returns:
        ``(advantages, returns)``, both ``[B, T]``.
    """
    scores = token_level_rewards.sum(dim=-1)
    include = _include_mask(baseline_mask, scores.shape[0], scores.device)
    mean, _, count = _group_stats(scores, index, include)
    singleton = count <= 1
    if bool((singleton & include).any()):
        warnings.warn("rloo: some groups have a single sample; their advantage is 0", stacklevel=2)
    scale = count / (count - 1).clamp_min(1)
    adv = (scores - mean) * scale
    adv = torch.where(include & ~singleton, adv, torch.zeros_like(adv))
    advantages = adv.unsqueeze(-1) * response_mask
    return advantages, advantages.clone()


def compute_reinforce_plus_plus_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    baseline_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted returns, whitened over the whole batch (no group baseline).

    Backward recursion, where the running return is reset by the mask of the *later* token::

        G_{i,T−1} = r_{i,T−1}
        G_{i,t}   = r_{i,t} + γ · m_{i,t+1} · G_{i,t+1}

    Then ``A = whiten(G) · m``, where ``whiten(x) = (x − μ) / sqrt(σ² + 1e-8)`` with ``μ``, ``σ²`` the mean and
    unbiased variance of ``G`` over all masked tokens of the included samples. ``returns = G · m``.
    Needs at least two masked tokens among included samples (whitening raises ``ValueError`` otherwise).

    Returns:
        ``(advantages, returns)``, both ``[B, T]``.
    """
    rewards = token_level_rewards
    mask = response_mask.to(rewards.dtype)
    include = _include_mask(baseline_mask, rewards.shape[0], rewards.device)
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
        running = running * mask[:, t]
    whiten_mask = mask * include.unsqueeze(-1).to(mask.dtype)
    advantages = masked_whiten(returns, whiten_mask) * whiten_mask
    return advantages, returns * whiten_mask


def compute_gae_advantage_return(
    *,
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lambd: float = 1.0,
    baseline_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation with a critic's values.

    With ``V = values · m`` (so ``V = 0`` past the response, in particular ``V_T = 0``)::

        δ_t = r_t + γ · V_{t+1} − V_t
        Â_t = δ_t + γλ · Â_{t+1}          (Â_T = 0)
        returns_t = (Â_t + V_t) · m_t      (the critic's regression target, taken before whitening)
        A_t = whiten(Â)_t · m_t

    ``whiten`` as in ``reinforce++``: masked mean and unbiased variance over the included samples' tokens.

    Args:
        token_level_rewards: ``[B, T]``.
        values: ``[B, T]`` critic values of the response tokens.
        response_mask: ``[B, T]``.
        gamma: discount ``γ``.
        lambd: GAE ``λ``.
        baseline_mask: optional ``[B]`` bool; excluded samples get advantage and returns 0.

    Returns:
        ``(advantages, returns)``, both ``[B, T]``.
    """
    if values is None:
        raise ValueError("gae needs the critic's values (set trainer.critic.model.path)")
    rewards = token_level_rewards
    mask = response_mask.to(rewards.dtype)
    include = _include_mask(baseline_mask, rewards.shape[0], rewards.device)
    v = values.detach().to(rewards.dtype) * mask
    seq_len = rewards.shape[1]
    gae = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(seq_len)):
        next_v = v[:, t + 1] if t + 1 < seq_len else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_v - v[:, t]
        last = delta + gamma * lambd * last
        gae[:, t] = last
    whiten_mask = mask * include.unsqueeze(-1).to(mask.dtype)
    returns = (gae + v) * whiten_mask
    advantages = masked_whiten(gae, whiten_mask) * whiten_mask
    return advantages, returns


def compute_advantages_and_returns(estimator: str, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Look ``estimator`` up in ``AdvantageEstimatorRegistry`` and call it with ``kwargs`` (keyword arguments).

    Example: ``compute_advantages_and_returns("grpo", token_level_rewards=r, response_mask=m, index=uids,
    grpo_norm_by_std=True, baseline_mask=ok)``.
    """
    return AdvantageEstimatorRegistry.get(estimator)(**kwargs)


def trajectory_index(is_last_step: Sequence[bool] | torch.Tensor) -> torch.Tensor:
    """Step-wise rows -> the trajectory each belongs to, ``[B]`` int64 (a trajectory's rows are contiguous and
    its last row has ``is_last_step`` True): ``[F, F, T, T, F, T] -> [0, 0, 0, 1, 2, 2]``."""
    last = torch.as_tensor(is_last_step, dtype=torch.bool)
    return torch.cumsum(last.long(), dim=0) - last.long()


def trajectory_sums(row_values: torch.Tensor, is_last_step: Sequence[bool] | torch.Tensor) -> torch.Tensor:
    """Step-wise rows' values ``[B]`` summed per trajectory ``[number of trajectories]``."""
    trajectory = trajectory_index(is_last_step).to(row_values.device)
    totals = torch.zeros(
        int(trajectory[-1]) + 1 if len(trajectory) else 0, dtype=row_values.dtype, device=row_values.device
    )
    return totals.scatter_add(0, trajectory, row_values)


def compute_step_wise_advantages(
    estimator: str,
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Index,
    is_last_step: Sequence[bool] | torch.Tensor,
    baseline_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step-wise training: every turn is its own row, and all rows of a trajectory share one advantage.

    The estimator runs once per trajectory, on its score ``R = Σ`` (the rewards of all its rows), as a one-token
    response, in the group of its prompt (``index`` of its last row); the resulting advantage ``A`` is broadcast
    to every row of the trajectory: ``advantages[i, t] = A_traj(i) · response_mask[i, t]``, returns likewise.
    For outcome estimators (grpo, rloo) this gives each trajectory the advantage it gets without step-wise mode.
    ``gae`` needs per-token values and is not supported here.
    """
    if estimator == AdvantageEstimator.GAE:
        raise ValueError("generator.step_wise_trajectories=true does not support advantage_estimator='gae'")
    trajectory = trajectory_index(is_last_step).to(token_level_rewards.device)
    last_rows = torch.nonzero(torch.as_tensor(is_last_step, dtype=torch.bool), as_tuple=True)[0]
    scores = trajectory_sums(token_level_rewards.sum(dim=-1), is_last_step)
    keys = index[last_rows] if isinstance(index, torch.Tensor) else [index[i] for i in last_rows.tolist()]
    per_trajectory, returns = compute_advantages_and_returns(
        estimator,
        token_level_rewards=scores.unsqueeze(-1),
        response_mask=torch.ones_like(scores).unsqueeze(-1),
        index=keys,
        baseline_mask=None if baseline_mask is None else torch.as_tensor(baseline_mask)[last_rows.cpu()],
        **kwargs,
    )
    mask = response_mask.to(token_level_rewards.dtype)
    return per_trajectory[trajectory, 0].unsqueeze(-1) * mask, returns[trajectory, 0].unsqueeze(-1) * mask


def normalize_advantages_over_batch(advantages: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """``trainer.algorithm.advantage_batch_normalize``: whiten the advantages over every token that is trained on,
    ``A ← (A − μ) / sqrt(σ² + 1e-8)`` with ``μ``, ``σ²`` the mean and unbiased variance over ``loss_mask``, and 0
    where the loss mask is 0. (Upstream takes ``μ`` over every position, padding included; this fork takes both
    statistics over the same tokens.)"""
    mask = loss_mask.to(advantages.dtype)
    return masked_whiten(advantages, mask) * mask


def compute_zero_variance_mask(rewards: torch.Tensor, index: Index, tol: float = 0.0) -> torch.Tensor:
    """Zero-variance filter: which samples still carry a learning signal.

    A group (samples sharing an ``index`` key) whose rewards are all equal (or whose unbiased std is ``≤ tol``
    when ``tol > 0``) has zero advantage under any group baseline, so its samples only dilute the loss. Returns a
    bool mask ``[B]``: False for every sample of such a group, True otherwise. Singleton groups are kept.
    Multiply the loss mask by it: ``loss_mask *= keep.unsqueeze(-1)``.

    Args:
        rewards: ``[B]`` per-sample rewards, or ``[B, T]`` token-level rewards (summed over ``T``).
        index: ``B`` group keys.
        tol: std tolerance; 0 means exactly equal rewards.
    """
    scores = rewards.sum(dim=-1) if rewards.dim() == 2 else rewards
    scores = scores.to(torch.float64)
    gids = group_ids_from_index(index, device=scores.device)
    n_groups = int(gids.max().item()) + 1 if gids.numel() else 0
    count = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device).scatter_add(
        0, gids, torch.ones_like(scores)
    )
    gmax = torch.full_like(count, -torch.inf).scatter_reduce(0, gids, scores, reduce="amax")
    gmin = torch.full_like(count, torch.inf).scatter_reduce(0, gids, scores, reduce="amin")
    mean = torch.zeros_like(count).scatter_add(0, gids, scores) / count
    sq_dev = torch.zeros_like(count).scatter_add(0, gids, (scores - mean[gids]) ** 2)
    std = (sq_dev / (count - 1).clamp_min(1)).sqrt()
    zero_var = (gmax == gmin) | (std <= tol)
    keep = ~zero_var | (count <= 1)
    return keep[gids]


AdvantageEstimatorRegistry.register(AdvantageEstimator.GRPO.value, compute_grpo_outcome_advantage)
AdvantageEstimatorRegistry.register(AdvantageEstimator.RLOO.value, compute_rloo_outcome_advantage)
AdvantageEstimatorRegistry.register(
    AdvantageEstimator.REINFORCE_PP.value, compute_reinforce_plus_plus_outcome_advantage
)
AdvantageEstimatorRegistry.register(AdvantageEstimator.GAE.value, compute_gae_advantage_return)
