"""Build a typed `SkyRLConfig` from `ppo_base_config.yaml`, preset files and Hydra-style command-line overrides.

Layers apply in order: the base config, the presets (`presets.py`: YAML files with the base config's nesting,
each after the presets it builds on), then the overrides. Overrides use Hydra's grammar (parsed by Hydra's own
parser): `key=value` changes a key, `+key=value` adds one, `++key=value` sets whether or not it exists, `~key`
deletes it (a declared key then falls back to its default). Values are YAML-ish: `a=[1,2]`, `b={x: 1}`, `c=null`,
`d='${trainer.seed}'`. Blocks merge key by key; any other value (a list too) replaces the one before. Keys are
checked against the schema: an unknown key is an error naming the full dotted key and the nearest declared one
(and the preset file that set it); a value of the wrong type is an error naming the key, the expected type and the
preset file that set it. Every problem found is reported in one `ConfigError`.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from skyrl_train.config.errors import ConfigError
from skyrl_train.config.presets import Preset, expand_presets
from skyrl_train.config.schema import AddedKeys, SkyRLConfig, extra_keys_field
from skyrl_train.config.validate import validate_cfg

__all__ = [
    "added_key_blocks",
    "BASE_CONFIG_PATH",
    "CONFIG_DIR",
    "CONFIG_NAME",
    "OVERRIDE",
    "LoadedConfig",
    "build_config",
    "load_config",
    "resolve_config",
    "type_name",
]

CONFIG_DIR = Path(__file__).resolve().parent
CONFIG_NAME = "ppo_base_config"
BASE_CONFIG_PATH = CONFIG_DIR / f"{CONFIG_NAME}.yaml"

# Upstream keys this fork drops on purpose; an override of one gets this reason instead of a guess.
_UNSUPPORTED_PREFIXES = {
    "trainer.policy.megatron_config": "the Megatron strategy is not supported in this fork",
    "trainer.ref.megatron_config": "the Megatron strategy is not supported in this fork",
    "generator.external_proxy_url": "upstream's new inference-server path is not supported in this fork",
    "generator.external_server_urls": "upstream's new inference-server path is not supported in this fork",
}

OVERRIDE = "override"
"""The source of a key set by a command-line override (a key set by a preset has the preset's path)."""

_NO_FIT = object()


@dataclasses.dataclass
class LoadedConfig:
    """A loaded config and, for every key a preset or an override set, which one set it last."""

    cfg: SkyRLConfig
    sources: dict[str, str]
    """Dotted key -> the preset's path or `OVERRIDE`; a block set as a whole has an entry per key in it."""

    def source_of(self, key: str) -> str | None:
        """Which preset or override set `key` (or the block it lies in); None when it keeps the base value."""
        return _source_of(self.sources, key)


def load_config(
    overrides: Iterable[str] | None = None, *, presets: Iterable[str | Path] = (), validate: bool = True
) -> SkyRLConfig:
    """Compose `ppo_base_config.yaml`, the `presets` files and Hydra-style `overrides`, in that order, into a typed,
    validated `SkyRLConfig`.

    Raises `ConfigError` listing every unknown key, type error and (with `validate`) rule violation.
    """
    return resolve_config(overrides, presets=presets, validate=validate).cfg


def resolve_config(
    overrides: Iterable[str] | None = None, *, presets: Iterable[str | Path] = (), validate: bool = True
) -> LoadedConfig:
    """`load_config`, keeping which preset or override set each key."""
    problems: list[str] = []
    sources: dict[str, str] = {}
    tree = OmegaConf.to_container(OmegaConf.load(BASE_CONFIG_PATH), resolve=False)
    for preset in expand_presets(presets):
        _apply_preset(tree, preset, sources, problems)
    _apply_overrides(tree, list(overrides or []), sources, problems)
    try:
        resolved = OmegaConf.to_container(OmegaConf.create(tree), resolve=True)
    except OmegaConfBaseException as e:
        raise ConfigError([*problems, f"Cannot resolve interpolation: {e}"]) from None
    cfg = _build_root(resolved, problems, sources)
    if problems:
        raise ConfigError(problems)
    if validate:
        validate_cfg(cfg)
    return LoadedConfig(cfg, sources)


def build_config(data: Mapping[str, Any] | DictConfig) -> SkyRLConfig:
    """A typed `SkyRLConfig` from a nested mapping (e.g. the DictConfig of a `@hydra.main` function).

    Missing keys take their defaults; unknown keys and wrong types raise one `ConfigError`. Does not
    run `validate_cfg`.
    """
    if isinstance(data, DictConfig):
        data = OmegaConf.to_container(data, resolve=True)
    problems: list[str] = []
    cfg = _build_root(data, problems, {}, added=True)  # what a hydra config has beyond the schema was added with `+`
    if problems:
        raise ConfigError(problems)
    return cfg


# ------------------------------------------------------------------------------------ presets, overrides


def _apply_preset(tree: dict, preset: Preset, sources: dict[str, str], problems: list[str]) -> None:
    where = preset.name
    for parts, value in _preset_entries(preset.values, (), where, problems):
        _set(tree, list(parts), value)
        _record(sources, ".".join(parts), value, where)


def _preset_entries(
    block: Mapping[Any, Any], prefix: tuple[str, ...], where: str, problems: list[str]
) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(key parts, value) of each value a preset sets: it descends through the schema's blocks; a free-form
    block (an env's, `engine_init_kwargs`) or a declared key is one entry."""
    for name, value in block.items():
        parts = (*prefix, str(name))
        key = ".".join(parts)
        if "." in str(name):
            problems.append(f"{where}: key '{key}': a preset nests its keys (`a: {{b: 1}}`), not dotted names.")
            continue
        kind = _classify(key)
        if kind is None:
            problems.append(f"{where}: {unknown_key_message(key)}")
        elif kind == "block" and isinstance(value, Mapping):
            yield from _preset_entries(value, parts, where, problems)
        else:
            yield parts, value


def _apply_overrides(tree: dict, overrides: list[str], sources: dict[str, str], problems: list[str]) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for line in overrides:
        try:
            (override,) = parser.parse_overrides([line])
        except HydraException as e:
            problems.append(f"Cannot parse override '{line}': {e}")
            continue
        key = override.key_or_group
        if override.is_sweep_override() or override.package is not None:
            problems.append(f"Override '{line}': sweeps and @package overrides are not supported.")
            continue
        kind = _classify(key)
        if kind is None:
            problems.append(unknown_key_message(key, added=override.is_add()))
            continue
        parts = key.split(".")
        exists = _exists(tree, parts)
        if override.is_delete():
            if not exists:
                problems.append(f"Cannot delete '{key}': it is not set.")
            else:
                _delete(tree, parts)
                _forget(sources, key)
            continue
        if override.is_add() and exists:
            problems.append(f"Cannot add '{key}': it already exists; use '{key}=...' or '++{key}=...'.")
            continue
        value = override.value()
        _set(tree, parts, value)
        _record(sources, key, value, OVERRIDE)


def _record(sources: dict[str, str], key: str, value: Any, source: str) -> None:
    """Note that `source` set `key` to `value`; a block merges (its other keys keep their sources), any other
    value replaces what was under `key`."""
    if not isinstance(value, Mapping):
        _forget(sources, key)
    for leaf in _leaf_keys(value, key):
        sources[leaf] = source


def _forget(sources: dict[str, str], key: str) -> None:
    for known in [k for k in sources if k == key or k.startswith(key + ".")]:
        del sources[known]


def _source_of(sources: Mapping[str, str], key: str) -> str | None:
    """The source of `key` or of the nearest block above it that a preset or override set."""
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        source = sources.get(".".join(parts[:end]))
        if source is not None:
            return source
    return None


def _exists(tree: dict, parts: list[str]) -> bool:
    node: Any = tree
    for p in parts:
        if not isinstance(node, dict) or p not in node:
            return False
        node = node[p]
    return True


def _delete(tree: dict, parts: list[str]) -> None:
    node = tree
    for p in parts[:-1]:
        node = node[p]
    del node[parts[-1]]


def _set(tree: dict, parts: list[str], value: Any) -> None:
    node = tree
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    last = parts[-1]
    if isinstance(value, dict) and isinstance(node.get(last), dict):
        node[last] = _merge(node[last], value)
    else:
        node[last] = value


def _merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for k, v in update.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# ------------------------------------------------------------------------------------ schema lookups


def _fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _is_open_type(tp: Any) -> bool:
    """True if any key below a field of this type is allowed (a dict or Any)."""
    if tp is Any:
        return True
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(_is_open_type(a) for a in typing.get_args(tp))
    return tp is dict or typing.get_origin(tp) is dict


def _classify(key: str) -> str | None:
    """'block' for a declared block, 'known' for a declared key, 'open' for a key under a free-form dict, None if
    unknown."""
    cls: Any = SkyRLConfig
    parts = key.split(".")
    for i, part in enumerate(parts):
        flds = _fields(cls)
        extra = extra_keys_field(cls)
        if part in flds and part != extra:
            tp = flds[part].type
            if dataclasses.is_dataclass(tp):
                cls = tp
                continue
            if i == len(parts) - 1:
                return "known"
            return "open" if _is_open_type(tp) else None
        return "open" if extra else None
    return "block"


def _all_keys(cls: type = SkyRLConfig, prefix: str = "") -> list[str]:
    keys = []
    for f in dataclasses.fields(cls):
        if f.name == extra_keys_field(cls):
            continue
        key = prefix + f.name
        keys.append(key)
        if dataclasses.is_dataclass(f.type):
            keys.extend(_all_keys(f.type, key + "."))
    return keys


def unknown_key_message(key: str, *, added: bool = False) -> str:
    """'Unknown config key ...' with the reason it was dropped upstream, or the nearest declared key; for a key
    `added` with `+`, also where added keys are kept."""
    for prefix, reason in _UNSUPPORTED_PREFIXES.items():
        if key == prefix or key.startswith(prefix + "."):
            return f"Unknown config key '{key}': {reason}."
    known = _all_keys()
    match = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if not match:
        leaf = key.rsplit(".", 1)[-1]
        match = [k for k in known if k.rsplit(".", 1)[-1] == leaf][:1]
    hint = f" Did you mean '{match[0]}'?" if match else ""
    if added:
        hint += f" Keys of your own code may be added under {' and '.join(added_key_blocks())} only."
    return f"Unknown config key '{key}'.{hint}"


def added_key_blocks(cls: type = SkyRLConfig, prefix: str = "") -> list[str]:
    """The blocks that keep keys added with `+` for custom code (`schema.AddedKeys`)."""
    blocks = [prefix.rstrip(".")] if issubclass(cls, AddedKeys) else []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.type):
            blocks += added_key_blocks(f.type, f"{prefix}{f.name}.")
    return blocks


# ----------------------------------------------------------------------------------------- building


def type_name(tp: Any) -> str:
    """Readable name of a field type: 'int', 'str | None', 'list[str]', 'dict[str, Any]'."""
    if tp is type(None):
        return "None"
    if tp is Any:
        return "Any"
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(a) for a in typing.get_args(tp))}]"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any) -> Any:
    """`value` converted to type `tp`, or _NO_FIT. Ints pass as floats, numbers as strings."""
    if tp is Any:
        return value
    if tp is type(None):
        return None if value is None else _NO_FIT
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arm in typing.get_args(tp):
            out = _coerce(value, arm)
            if out is not _NO_FIT:
                return out
        return _NO_FIT
    if origin is list:
        if not isinstance(value, list | tuple):
            return _NO_FIT
        (item_tp,) = typing.get_args(tp)
        items = [_coerce(v, item_tp) for v in value]
        return _NO_FIT if any(i is _NO_FIT for i in items) else items
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            return _NO_FIT
        value_tp = typing.get_args(tp)[1] if typing.get_args(tp) else Any
        items = {str(k): _coerce(v, value_tp) for k, v in value.items()}
        return _NO_FIT if any(v is _NO_FIT for v in items.values()) else items
    if isinstance(value, bool):
        return value if tp is bool else _NO_FIT
    if tp is int:
        if isinstance(value, int):
            return value
        return int(value) if isinstance(value, float) and value.is_integer() else _NO_FIT
    if tp is float:
        return float(value) if isinstance(value, int | float) else _NO_FIT
    if tp is str:
        if isinstance(value, str):
            return value
        return str(value) if isinstance(value, int | float) else _NO_FIT
    return value if isinstance(value, tp) else _NO_FIT


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _leaf_keys(value: Any, prefix: str) -> list[str]:
    if isinstance(value, Mapping) and value:
        return [k for sub, v in value.items() for k in _leaf_keys(v, f"{prefix}.{sub}")]
    return [prefix]


def _build_root(data: Any, problems: list[str], sources: Mapping[str, str], added: bool = False) -> SkyRLConfig:
    """`data` as a `SkyRLConfig`; a problem with a key a preset set names the preset (`sources`) first; `added`: the
    keys beyond the schema were added with `+` (`unknown_key_message`)."""
    if not isinstance(data, Mapping):
        problems.append(f"config: expected a mapping, got {_describe(data)}")
        return SkyRLConfig()
    return _build(SkyRLConfig, data, "", problems, sources, added)


def _in_preset(sources: Mapping[str, str], key: str) -> str:
    """'<preset path>: ' when a preset set `key`, else ''."""
    source = _source_of(sources, key)
    return "" if source in (None, OVERRIDE) else f"{source}: "


def _build(
    cls: type, data: Mapping[str, Any], prefix: str, problems: list[str], sources: Mapping[str, str], added: bool
) -> Any:
    flds = _fields(cls)
    extra = extra_keys_field(cls)
    kwargs: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        f = flds.get(name)
        if f is None or name == extra:
            if extra is None:
                problems.extend(
                    _in_preset(sources, k) + unknown_key_message(k, added=added) for k in _leaf_keys(value, key)
                )
            elif name == extra and isinstance(value, Mapping):
                extras.update(value)
            else:
                extras[name] = value
            continue
        if dataclasses.is_dataclass(f.type):
            if isinstance(value, Mapping):
                kwargs[name] = _build(f.type, value, key + ".", problems, sources, added)
            else:
                problems.append(
                    f"{_in_preset(sources, key)}{key}: expected a mapping (a block of keys), got {_describe(value)}"
                )
            continue
        out = _coerce(value, f.type)
        if out is _NO_FIT:
            problems.append(f"{_in_preset(sources, key)}{key}: expected {type_name(f.type)}, got {_describe(value)}")
        else:
            kwargs[name] = out
    if extra is not None:
        kwargs[extra] = _check_extras(cls, extras, flds[extra], prefix, problems, sources)
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a block that validates its own values (e.g. SamplingParams)
        problems.append(f"{prefix.rstrip('.') or 'config'}: {exc}")
        return cls()


def _check_extras(
    cls: type, extras: dict, f: dataclasses.Field, prefix: str, problems: list[str], sources: Mapping[str, str]
) -> dict:
    """Undeclared keys of an open block, merged over its defaults; near-misses of declared keys are errors."""
    declared = [n for n in _fields(cls) if n != f.name]
    value_tp = typing.get_args(f.type)[1]
    what = f.metadata.get("help", "").rstrip(".")
    out = f.default_factory()
    for name, value in extras.items():
        key = f"{prefix}{name}"
        near = difflib.get_close_matches(name, declared, n=1, cutoff=0.85)
        if near:
            problems.append(f"{_in_preset(sources, key)}Unknown config key '{key}'. Did you mean '{prefix}{near[0]}'?")
            continue
        fitted = _coerce(value, value_tp)
        if fitted is _NO_FIT:
            problems.append(
                f"{_in_preset(sources, key)}{key}: expected {type_name(value_tp)} ({what}), got {_describe(value)}"
            )
        elif isinstance(fitted, dict) and isinstance(out.get(name), dict):
            out[name] = _merge(out[name], fitted)
        else:
            out[name] = fitted
    return out
