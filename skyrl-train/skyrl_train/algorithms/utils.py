"""Small helpers shared by the algorithm modules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["config_value"]


def config_value(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` for a mapping, ``config.key`` for an object, ``default`` if absent or ``config`` is None.

    Lets the algorithms read upstream's ``trainer.algorithm`` keys from a dataclass, an OmegaConf node or a dict.
    """
    if config is None:
        return default
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)
