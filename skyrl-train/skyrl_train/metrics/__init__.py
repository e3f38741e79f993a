"""Metric definitions shared by training and evaluation: each logged number is defined once, here."""

from skyrl_train.metrics.reward_metrics import compute_reward_metrics, pass_hat_k_metrics, sanitize_metric_key

__all__ = ["compute_reward_metrics", "pass_hat_k_metrics", "sanitize_metric_key"]
