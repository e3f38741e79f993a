"""Config blocks as plain Python containers, whichever form the caller passes (OmegaConf, dataclass, mapping)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf


def to_plain(block: Any) -> Any:
    """A config block (DictConfig, typed dataclass, mapping or None) as plain Python containers."""
    if isinstance(block, DictConfig | ListConfig):
        return OmegaConf.to_container(block, resolve=True)
    if dataclasses.is_dataclass(block) and not isinstance(block, type):
        return dataclasses.asdict(block)
    if isinstance(block, Mapping):
        return dict(block)
    return block
