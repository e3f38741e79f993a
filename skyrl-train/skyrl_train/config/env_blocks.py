"""The per-env blocks of `environment.skyrl_gym`, checked against the registered envs and the keys each declares.

Every key of `environment.skyrl_gym` besides `max_env_workers` is one env's config block, passed whole as `env_config`
to the env registered under that id. A block whose id names no registered env would be dropped, and a key its env
does not read would do nothing, so `env_block_problems` reports both, naming the block or key and the known ones:

- the registered envs are the built-ins, installed packages' `skyrl_gym.envs` entry points and `skyrl_gym.register`
  calls made before the config is loaded;
- an env declares the keys of its block with `skyrl_gym.Env.env_config_keys` (reading it imports the env's module);
  an env that declares none (one written for upstream skyrl-gym) gets its block unchecked;
- a block equal to its schema default is never refused (upstream's default blocks include envs this fork does not
  ship: `llm_as_a_judge`, `search`).

The env checks the values (and nested keys) itself when it is made: the preflight does that before the model loads.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from skyrl_train.config.schema import SkyRLConfig, SkyRLGymConfig

__all__ = ["env_block_problems"]

WHERE = "environment.skyrl_gym"


def env_block_problems(cfg: SkyRLConfig) -> list[str]:
    """One problem per block of `environment.skyrl_gym` that names no registered env, and per key of a block that
    its env does not declare."""
    # Imported when called: the config package must import without the envs (and skyrl_gym's registry is only
    # complete once the caller's own registrations ran).
    import skyrl_gym

    skyrl_gym.load_entry_point_envs()
    defaults = SkyRLGymConfig().env_configs
    problems: list[str] = []
    for env_id, block in cfg.environment.skyrl_gym.env_configs.items():
        if defaults.get(env_id) != block:
            problems += _block_problems(skyrl_gym, env_id, block)
    return problems


def _block_problems(skyrl_gym: Any, env_id: str, block: Any) -> list[str]:
    where = f"{WHERE}.{env_id}"
    registered = sorted(skyrl_gym.registry)
    if env_id not in registered:
        return [
            f"{where}: no env is registered under {env_id!r}{_did_you_mean(env_id, registered)}, so this block would "
            f"configure nothing; registered env ids: {', '.join(registered)} (a block configures the env of its id; "
            "register an env with skyrl_gym.register or the `skyrl_gym.envs` entry-point group)."
        ]
    if not isinstance(block, Mapping):
        return [f"{where} must be a mapping of the env's config keys, got {type(block).__name__}: {block!r}."]
    try:
        keys = skyrl_gym.config_keys(env_id)
    except Exception as exc:  # the env's module fails to import: name it here rather than at the first env made
        entry_point = skyrl_gym.registry[env_id].entry_point
        return [
            f"{where}: cannot load env {env_id!r} ({entry_point!r}) to read its config keys: {type(exc).__name__}: {exc}"
        ]
    if keys is None:
        return []
    known = ", ".join(sorted(keys)) if keys else "none (it reads no config)"
    return [
        f"{where}.{key}: env {env_id!r} has no config key {key!r}{_did_you_mean(key, keys)}; its keys: {known}."
        for key in sorted(set(block) - keys)
    ]


def _did_you_mean(name: str, known: Any) -> str:
    match = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""
