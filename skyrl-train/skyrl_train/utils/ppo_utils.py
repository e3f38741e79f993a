"""Upstream SkyRL's ``skyrl_train.utils.ppo_utils`` path, kept so existing imports keep working.

The implementations live in ``skyrl_train.algorithms`` (one small module per concept); this module re-exports
them. See ``skyrl_train.algorithms.reductions`` for how loss reductions stay exact across micro-batches, and
``skyrl_train.algorithms.advantages`` for ``baseline_mask`` (keeping infrastructure failures out of the
advantage baseline).
"""

from skyrl_train.algorithms import *  # noqa: F403
from skyrl_train.algorithms import __all__  # noqa: F401
