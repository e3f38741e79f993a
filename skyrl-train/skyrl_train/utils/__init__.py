"""Utilities for skyrl_train, at the bottom of its layers with `skyrl_train.types` (see ``tests/test_layers.py``).

``ppo_utils`` keeps upstream SkyRL's module path for the algorithms: it re-exports them, and so sits in their layer.
"""
