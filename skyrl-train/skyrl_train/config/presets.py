"""Preset files: YAML configs with the base config's nesting, given with `--config FILE` and merged over the base.

A preset may build on others through a top-level `defaults` list, as in Hydra: each entry is a path relative to
the preset's own folder (the `.yaml` suffix may be left out), applied before the preset's own keys unless the list
places `_self_` elsewhere. A preset reached twice (two presets building on one recipe) is applied once, at its
first place; a preset that builds on itself, directly or not, is an error naming the chain. YAML refuses a key
written twice in one file, including a block written twice (`trainer:` twice).

    # examples/mcp/grpo.yaml
    defaults: [../cpu_lora_grpo.yaml, ../cpu_tool_call.yaml]
    trainer:
      eval_interval: 9

This module reads the files and orders them; `loader.py` checks their keys against the schema and merges them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from skyrl_train.config.errors import ConfigError

__all__ = ["DEFAULTS_KEY", "Preset", "expand_presets", "split_cli_args"]

DEFAULTS_KEY = "defaults"
_SELF = "_self_"
_SUFFIXES = (".yaml", ".yml")


@dataclasses.dataclass(frozen=True)
class Preset:
    """One preset file's own keys (its `defaults` list taken out)."""

    path: Path
    values: dict[str, Any]

    @property
    def name(self) -> str:
        """The path as errors and the config log show it."""
        return _display_path(self.path)


def _display_path(path: Path) -> str:
    """`path` relative to the working folder when it lies inside it, else absolute."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else Path(relative).as_posix()


def split_cli_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """`(preset files, overrides)` of a command line: `--config FILE` and `--config=FILE` (repeatable) name preset
    files, every other argument is a Hydra-style override; both keep their order."""
    presets: list[str] = []
    overrides: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--config":
            path = next(rest, None)
            if path is None:
                raise ConfigError(["--config needs a preset file: --config preset.yaml"])
            presets.append(path)
        elif arg.startswith("--config="):
            path = arg.removeprefix("--config=")
            if not path:
                raise ConfigError(["--config= needs a preset file: --config=preset.yaml"])
            presets.append(path)
        else:
            overrides.append(arg)
    return presets, overrides


def expand_presets(paths: Iterable[str | os.PathLike]) -> list[Preset]:
    """The presets named by `paths` and everything they build on, in the order they apply (each file once)."""
    order: list[Preset] = []
    applied: set[Path] = set()
    for path in paths:
        _expand(Path(path).expanduser().resolve(), (), order, applied)
    return order


def _expand(path: Path, chain: tuple[Path, ...], order: list[Preset], applied: set[Path]) -> None:
    if path in chain:
        cycle = " -> ".join(_display_path(p) for p in (*chain, path))
        raise ConfigError([f"Preset cycle: {cycle}"])
    if path in applied:
        return
    values, defaults = _read(path, chain)
    for entry in defaults if _SELF in defaults else [*defaults, _SELF]:
        if entry == _SELF:
            applied.add(path)
            order.append(Preset(path, values))
        else:
            _expand(_entry_path(path, entry), (*chain, path), order, applied)


def _read(path: Path, chain: tuple[Path, ...]) -> tuple[dict[str, Any], list[str]]:
    """The file's keys without `defaults`, and its `defaults` entries."""
    name = _display_path(path)
    if not path.is_file():
        named_by = f" (in the defaults of {_display_path(chain[-1])})" if chain else ""
        raise ConfigError([f"Preset file not found: {name}{named_by}"])
    try:
        loaded = OmegaConf.load(path)
    except (yaml.YAMLError, OmegaConfBaseException) as e:  # YAML syntax, a key written twice, a bad ${...}
        raise ConfigError([f"{name}: cannot be read: {e}"]) from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError([f"{name}: a preset is a mapping of config keys, got a {type(loaded).__name__}"])
    values = OmegaConf.to_container(loaded, resolve=False)
    defaults = values.pop(DEFAULTS_KEY, [])
    return values, _check_defaults(defaults, name)


def _check_defaults(defaults: Any, name: str) -> list[str]:
    if not isinstance(defaults, list) or not all(isinstance(entry, str) and entry for entry in defaults):
        raise ConfigError([f"{name}: '{DEFAULTS_KEY}' must be a list of preset paths (strings), got {defaults!r}"])
    if defaults.count(_SELF) > 1:
        raise ConfigError([f"{name}: '{_SELF}' appears more than once in '{DEFAULTS_KEY}'"])
    return defaults


def _entry_path(preset: Path, entry: str) -> Path:
    """A `defaults` entry as a file: relative to the preset's folder, `.yaml` added when it has no YAML suffix."""
    path = preset.parent / Path(entry).expanduser()
    if path.suffix not in _SUFFIXES:
        path = path.with_name(path.name + ".yaml")
    return path.resolve()
