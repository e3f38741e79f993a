"""Training strategies: how ``trainer.strategy`` builds, places and releases the policy, reference and critic.

- base.py: the ``Strategy`` interface (build and release the workers, how a local engine gets the policy's weights,
  the device and dtype of this process's models) and ``EnginePolicy``;
- single.py: ``SingleProcess`` (``single``): every worker in this process;
- fsdp2.py: ``FSDP2`` (``fsdp2``): Ray actor groups of FSDP2 ranks (``skyrl_train.distributed``).

``strategy_for(cfg)`` is the one place that maps the name to its class. Both build their workers' arguments with
``skyrl_train.workers.builder.WorkerBuilder``; the workers they return satisfy ``skyrl_train.workers.protocols``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyrl_train.config.errors import ConfigError
from skyrl_train.strategies.base import EnginePolicy, Strategy
from skyrl_train.strategies.fsdp2 import FSDP2
from skyrl_train.strategies.single import SingleProcess

if TYPE_CHECKING:
    from skyrl_train.config.schema import SkyRLConfig
    from skyrl_train.storage import S3Settings

__all__ = ["FSDP2", "STRATEGY_CLASSES", "EnginePolicy", "SingleProcess", "Strategy", "strategy_for"]

STRATEGY_CLASSES: dict[str, type[Strategy]] = {cls.name: cls for cls in (SingleProcess, FSDP2)}
"""Each ``trainer.strategy`` value and its class (the config's ``STRATEGIES`` names the same ones)."""


def strategy_for(cfg: SkyRLConfig, *, s3: S3Settings | None = None, checkpoints: bool = False) -> Strategy:
    """The strategy ``cfg.trainer.strategy`` names (``s3`` and ``checkpoints``: see ``Strategy``).

    Raises:
        ConfigError: an unknown ``trainer.strategy``.
    """
    name = cfg.trainer.strategy
    if name not in STRATEGY_CLASSES:
        raise ConfigError([f"trainer.strategy must be one of {', '.join(map(repr, STRATEGY_CLASSES))}, got {name!r}"])
    return STRATEGY_CLASSES[name](cfg, s3=s3, checkpoints=checkpoints)
