"""Config blocks as plain Python containers, whichever form the caller passes (OmegaConf, dataclass, mapping)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
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


def keys_of(config_class: type) -> frozenset[str]:
    """The field names of a config dataclass: the keys of the block it reads (for `Env.env_config_keys`)."""
    return frozenset(f.name for f in dataclasses.fields(config_class))


def checked_block(block: Any, allowed: Collection[str], where: str) -> dict[str, Any]:
    """A config block as a plain dict ({} for None), after checking that it is a mapping whose keys are all in
    `allowed`; otherwise a ValueError that starts with `where` and names the unknown keys and the allowed ones."""
    raw = to_plain(block) or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        known = f"allowed: {sorted(allowed)}" if allowed else "it takes no config keys"
        raise ValueError(f"{where}: unknown key(s) {unknown}; {known}")
    return dict(raw)
