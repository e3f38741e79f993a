"""A loaded config's difference from the base config, key by key, with what set each key: the entrypoints log it
once when a run starts, so a run's log says which preset or override chose every value that is not the base's. The
log shows a secret entry's value as ``<redacted>`` (`skyrl_train.utils.redact`), but still names the key and its
source."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from skyrl_train.config.loader import BASE_CONFIG_PATH, CONFIG_NAME, LoadedConfig, added_key_blocks, load_config
from skyrl_train.config.schema import to_dict
from skyrl_train.utils.redact import redact_secrets

__all__ = ["DERIVED", "UNSET", "ConfigChange", "added_keys", "config_changes", "flatten", "format_config_changes"]

DERIVED = "derived by validation"
"""The source of a key no preset or override set that validation filled in (e.g. `trainer.algorithm.max_seq_len`)."""

_MAX_VALUE_CHARS = 100


class _Unset:
    def __repr__(self) -> str:
        return "(unset)"


UNSET = _Unset()
"""The value on the side of a change where the key does not exist (a key a preset adds to a free-form block)."""


@dataclasses.dataclass(frozen=True)
class ConfigChange:
    """One key whose value differs from the base config's, and what set it: a preset's path, `OVERRIDE`, the base
    config's interpolation it follows (`${trainer.max_prompt_length}`), or `DERIVED`."""

    key: str
    base: Any
    value: Any
    source: str


def config_changes(loaded: LoadedConfig) -> list[ConfigChange]:
    """Every key of `loaded.cfg` whose value differs from the base config's, in the config's order."""
    base = flatten(to_dict(load_config(validate=False)))
    raw_base = flatten(OmegaConf.to_container(OmegaConf.load(BASE_CONFIG_PATH), resolve=False))
    now = flatten(to_dict(loaded.cfg))
    changes = []
    for key in [*now, *(k for k in base if k not in now)]:
        before, after = base.get(key, UNSET), now.get(key, UNSET)
        if before != after:
            changes.append(ConfigChange(key, before, after, _source(loaded, key, raw_base.get(key))))
    return changes


def added_keys(cfg: Any) -> dict[str, Any]:
    """Dotted key -> value of every key of a `SkyRLConfig` added with `+`, kept for custom code (`schema.AddedKeys`)."""
    out: dict[str, Any] = {}
    for block in added_key_blocks():
        node = cfg
        for part in block.split("."):
            node = getattr(node, part)
        out.update(flatten(node.extra, f"{block}."))
    return out


def format_config_changes(changes: list[ConfigChange]) -> str:
    """The log text: a header line, then `key: base -> value  [source]` per change (secret values redacted)."""
    if not changes:
        return f"Config: the base config ({CONFIG_NAME}.yaml), unchanged."
    lines = [
        f"Config: {len(changes)} keys differ from the base config ({CONFIG_NAME}.yaml); key: base -> value [set by]"
    ]
    lines += [f"  {c.key}: {_shown(c.key, c.base)} -> {_shown(c.key, c.value)}  [{c.source}]" for c in changes]
    return "\n".join(lines)


def _source(loaded: LoadedConfig, key: str, raw_base_value: Any) -> str:
    source = loaded.source_of(key)
    if source is not None:
        return source
    if isinstance(raw_base_value, str) and "${" in raw_base_value:
        return raw_base_value
    return DERIVED


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted key -> value of every leaf; an empty block has no leaves."""
    out: dict[str, Any] = {}
    for name, value in tree.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


def _shown(key: str, value: Any) -> str:
    """`value` of `key` as the log shows it: secrets redacted, long values cut."""
    text = repr(value if value is UNSET else redact_secrets(value, key.split(".")))
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 3] + "..."
