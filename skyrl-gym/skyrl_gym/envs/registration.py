"""The environment registry: `register` an id once, `make` it anywhere.

Entry points are lazy `"package.module:ClassName"` strings, imported on the first `make`. Besides
explicit `register` calls, installed packages can declare environments in the Python entry-point
group `skyrl_gym.envs` (name = env id, value = `"module:Class"`), e.g. in a pyproject.toml:

    [project.entry-points."skyrl_gym.envs"]
    my_env = "my_package.env:MyEnv"

Those are registered the first time an unknown id is looked up, so `make("my_env")` works in any
process (a Ray worker, a subprocess) without a custom main. An explicit `register` of the same id
takes precedence over an entry point.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import json
import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from skyrl_gym.core import Env
from skyrl_gym.error import Error, RegistrationError

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "skyrl_gym.envs"

EnvCreator = Callable[..., Env]


@dataclasses.dataclass
class EnvSpec:
    """How to build one environment: its id, a `"module:Class"` string or a callable, default kwargs."""

    id: str
    entry_point: str | EnvCreator
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.id

    def make(self, **kwargs) -> Env:
        return make(self, **kwargs)

    def to_json(self) -> str:
        if not isinstance(self.entry_point, str):
            raise ValueError(f"EnvSpec {self.id!r} has a callable entry point and cannot be serialised to JSON")
        return json.dumps({"id": self.id, "entry_point": self.entry_point, "kwargs": self.kwargs})

    @staticmethod
    def from_json(text: str) -> EnvSpec:
        data = json.loads(text)
        return EnvSpec(id=data["id"], entry_point=data["entry_point"], kwargs=data.get("kwargs") or {})


registry: dict[str, EnvSpec] = {}
_entry_points_loaded = False


def register(id: str, entry_point: str | EnvCreator, kwargs: dict[str, Any] | None = None) -> None:
    """Register env `id`. `entry_point` is `"module:Class"` (imported lazily) or a callable returning an Env."""
    if not entry_point:
        raise RegistrationError(f"env {id!r}: an entry_point is required")
    if id in registry:
        raise RegistrationError(f"env {id!r} is already registered (entry point {registry[id].entry_point!r})")
    registry[id] = EnvSpec(id=id, entry_point=entry_point, kwargs=dict(kwargs or {}))


def deregister(id: str) -> None:
    """Remove env `id` from the registry."""
    if id not in registry:
        raise Error(f"env {id!r} is not registered")
    del registry[id]


def load_env_creator(entry_point: str | EnvCreator) -> EnvCreator:
    """Resolve an entry point to the class or callable it names, importing its module."""
    if callable(entry_point):
        return entry_point
    module_name, sep, attr = entry_point.partition(":")
    if not sep or not module_name or not attr:
        raise Error(f"entry point {entry_point!r} is not of the form 'package.module:ClassName'")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise Error(f"entry point {entry_point!r}: module {module_name!r} has no attribute {attr!r}") from None


def load_entry_point_envs() -> list[str]:
    """Register the envs declared by installed packages (group `skyrl_gym.envs`); returns the new ids."""
    global _entry_points_loaded
    _entry_points_loaded = True
    added = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in registry:
            if registry[ep.name].entry_point != ep.value:
                logger.debug("env %r from entry point %r shadowed by an explicit registration", ep.name, ep.value)
            continue
        register(ep.name, ep.value)
        added.append(ep.name)
    return added


def spec(env_id: str) -> EnvSpec:
    """The spec registered under `env_id` (installed packages' entry points are consulted on a miss)."""
    if env_id not in registry and not _entry_points_loaded:
        load_entry_point_envs()
    if env_id not in registry:
        hint = difflib.get_close_matches(env_id, registry, n=1)
        suggestion = f" Did you mean {hint[0]!r}?" if hint else ""
        raise Error(
            f"No registered env with id {env_id!r}.{suggestion} "
            f"Call skyrl_gym.pprint_registry() to list the registered envs."
        )
    return registry[env_id]


def config_keys(env_id: str) -> frozenset[str] | None:
    """The config keys env `env_id` declares (its class's `Env.env_config_keys`), or None when it declares none (a
    factory function, or an env written for upstream skyrl-gym). Imports the env's module."""
    keys = getattr(load_env_creator(spec(env_id).entry_point), "env_config_keys", None)
    return None if keys is None else frozenset(keys)


def make(id: str | EnvSpec, **kwargs) -> Env:
    """Build an env: the spec's default kwargs updated with `kwargs` (upstream passes `env_config=`, `extras=`)."""
    env_spec = id if isinstance(id, EnvSpec) else spec(id)
    env_kwargs = copy.deepcopy(env_spec.kwargs)
    env_kwargs.update(kwargs)
    creator = load_env_creator(env_spec.entry_point)
    try:
        env = creator(**env_kwargs)
    except TypeError as exc:
        raise TypeError(f"{exc} (while making env {env_spec.id!r} with kwargs {sorted(env_kwargs)})") from exc
    if not isinstance(env, Env):
        raise TypeError(f"env {env_spec.id!r}: {creator!r} returned {type(env).__name__}, not a skyrl_gym.Env")
    env.spec = EnvSpec(id=env_spec.id, entry_point=env_spec.entry_point, kwargs=env_kwargs)
    return env


def pprint_registry(print_output: bool = True) -> str | None:
    """Print (or return) the registered env ids, including those declared by installed packages."""
    if not _entry_points_loaded:
        load_entry_point_envs()
    text = "\n".join(f"{env_id}: {registry[env_id].entry_point}" for env_id in sorted(registry))
    if print_output:
        print(text)
        return None
    return text
