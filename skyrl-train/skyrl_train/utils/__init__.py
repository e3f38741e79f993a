"""Utilities for skyrl_train (``ppo_utils`` keeps upstream SkyRL's module path for the algorithms)."""
