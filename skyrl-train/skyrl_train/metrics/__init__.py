"""Metric definitions shared by training and evaluation: each logged number is defined once, here."""

from skyrl_train.metrics.reward_metrics import (
    compute_reward_metrics,
    pass_hat_k,
    pass_hat_k_metrics,
    sanitize_metric_key,
    trajectory_outcome,
    trajectory_return,
    trajectory_solved,
)

__all__ = [
    "compute_reward_metrics",
    "pass_hat_k",
    "pass_hat_k_metrics",
    "sanitize_metric_key",
    "trajectory_outcome",
    "trajectory_return",
    "trajectory_solved",
]
