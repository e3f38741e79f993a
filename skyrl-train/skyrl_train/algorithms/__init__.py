"""RL algorithms: advantage estimators, policy and value losses, loss reductions, KL, entropy, registries.

Modules:

- ``advantages``: ``grpo``, ``rloo``, ``reinforce++``, ``gae`` (with ``baseline_mask`` to keep infrastructure
  failures out of the baseline) and the zero-variance filter;
- ``policy_losses``: ``regular``, ``dual_clip``, ``gspo`` (per-token loss + health metrics), ``cross_entropy`` (SFT);
- ``reductions``: ``token_mean``, ``sequence_mean``, ``seq_mean_token_sum_norm``, exact across micro-batches;
- ``off_policy``: off-policy correction against the rollout logprobs (token / sequence TIS, outlier and sequence
  masks) and its statistics;
- ``kl``: ``k1``/``k2``/``k3``/``abs`` estimators, KL-in-reward penalty, fixed and adaptive controllers;
- ``critic``: clipped value loss; ``entropy``: token entropy from logits;
- ``AdvantageEstimatorRegistry``, ``PolicyLossRegistry`` (defined in ``skyrl_train.config.registries``);
- ``masked``: masked statistics.

``skyrl_train.utils.ppo_utils`` re-exports all of it under upstream SkyRL's module path.
"""

from skyrl_train.algorithms.advantages import (
    GRPO_EPSILON,
    AdvantageEstimator,
    compute_advantages_and_returns,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_rloo_outcome_advantage,
    compute_step_wise_advantages,
    compute_zero_variance_mask,
    normalize_advantages_over_batch,
    trajectory_index,
    trajectory_sums,
)
from skyrl_train.algorithms.critic import ppo_critic_loss
from skyrl_train.algorithms.entropy import compute_entropy
from skyrl_train.algorithms.kl import (
    AdaptiveKLController,
    FixedKLController,
    KLEstimator,
    apply_kl_penalty,
    compute_approx_kl,
    get_kl_controller,
)
from skyrl_train.algorithms.masked import group_ids_from_index, masked_mean, masked_sum, masked_var, masked_whiten
from skyrl_train.algorithms.policy_losses import (
    PolicyLossType,
    cross_entropy_loss,
    dual_clip_policy_loss,
    gspo_policy_loss,
    ppo_policy_loss,
)
from skyrl_train.algorithms.reductions import LossReduction, compute_loss_normalizer, reduce_loss
from skyrl_train.config.registries import (
    AdvantageEstimatorRegistry,
    PolicyLossRegistry,
    register_advantage_estimator,
    register_policy_loss,
)

__all__ = [
    "GRPO_EPSILON",
    "AdaptiveKLController",
    "AdvantageEstimator",
    "AdvantageEstimatorRegistry",
    "FixedKLController",
    "KLEstimator",
    "LossReduction",
    "PolicyLossRegistry",
    "PolicyLossType",
    "apply_kl_penalty",
    "compute_advantages_and_returns",
    "compute_approx_kl",
    "compute_entropy",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_loss_normalizer",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_zero_variance_mask",
    "compute_step_wise_advantages",
    "normalize_advantages_over_batch",
    "trajectory_index",
    "trajectory_sums",
    "cross_entropy_loss",
    "dual_clip_policy_loss",
    "get_kl_controller",
    "group_ids_from_index",
    "gspo_policy_loss",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "ppo_critic_loss",
    "ppo_policy_loss",
    "reduce_loss",
    "register_advantage_estimator",
    "register_policy_loss",
]
