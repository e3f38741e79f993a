"""Environment preflight: catch deterministic env failures before the model loads.

During training an env that cannot start becomes an infrastructure-failure placeholder (the generator never
crashes a batch), which is right for a tool server that hiccups and wrong for a setup that can never work: an
unknown env id, a row whose `reward_spec` the env cannot read, a file named in an env config that does not exist.
Those would turn every trajectory into a placeholder and the run would "train" on nothing. `check_envs` finds
them first: it resolves every env class named by the config (`environment.env_class`) and the data (a row's `env_class`)
and runs each env's `init` (then `close`) on the first rows of each data source, raising `PreflightError` with
the env, the dataset file, the row and the env's own error (which names the field or file at fault).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import skyrl_gym
from skyrl_train.config.schema import SkyRLConfig
from skyrl_train.dataset import PromptDataset

__all__ = ["PreflightError", "check_envs", "ROWS_PER_SOURCE"]

ROWS_PER_SOURCE = 2
"""Rows per (data source, env class) whose env `init` the preflight runs."""


class PreflightError(RuntimeError):
    """An env cannot run on the run's data: the message names the env, the dataset file and row, and the cause."""


def check_envs(
    cfg: SkyRLConfig, datasets: Mapping[str, PromptDataset | None], rows_per_source: int = ROWS_PER_SOURCE
) -> list[str]:
    """Run the checks of the module doc on every dataset (`{"data.train_data": train, "data.val_data": val}`);
    returns one line per env init that passed, raises `PreflightError` listing every failure."""
    skyrl_gym.load_entry_point_envs()
    passed, problems = [], []
    if cfg.environment.env_class not in skyrl_gym.registry:
        problems.append(f"environment.env_class={cfg.environment.env_class!r}: {_unknown(cfg.environment.env_class)}")
    for key, dataset in datasets.items():
        if dataset is None:
            continue
        for index in _sample_rows(cfg, dataset, rows_per_source):
            messages, env_class, extras, _ = dataset[index]
            env_class = env_class or cfg.environment.env_class
            source, row = dataset.origin(index)
            where = f"{key} {source} row {row} (env_class {env_class!r})"
            try:
                _init_and_close(cfg, env_class, messages, extras)
            except _UnknownEnv as exc:
                problems.append(f"{where}: {exc}")
            except Exception as exc:  # the env's own error names what is wrong with the row or its config
                problems.append(f"{where}: env init failed: {type(exc).__name__}: {exc}")
            else:
                passed.append(f"{where}: init ok")
    if problems:
        raise PreflightError(
            "the environments cannot run on this data (checked before loading the model):\n  - "
            + "\n  - ".join(problems)
        )
    return passed


class _UnknownEnv(Exception):
    pass


def _sample_rows(cfg: SkyRLConfig, dataset: PromptDataset, per_group: int) -> list[int]:
    """The first `per_group` rows of each (data source, env class) of the dataset."""
    taken: dict[tuple[str | None, str], int] = {}
    rows = []
    for index in range(len(dataset)):
        _, env_class, extras, _ = dataset[index]
        group = (extras.get("data_source"), env_class or cfg.environment.env_class)
        if taken.get(group, 0) < per_group:
            taken[group] = taken.get(group, 0) + 1
            rows.append(index)
    return rows


def _init_and_close(cfg: SkyRLConfig, env_class: str, messages, extras: dict) -> None:
    if env_class not in skyrl_gym.registry:
        raise _UnknownEnv(_unknown(env_class))
    env_config = cfg.environment.skyrl_gym.get_env_config(env_class)
    env = skyrl_gym.make(env_class, env_config=env_config, extras={**extras, "max_turns": cfg.generator.max_turns})
    asyncio.run(_init_then_close(env, messages))


def _unknown(env_class: str) -> str:
    return (
        f"no env is registered under {env_class!r}; registered: {', '.join(sorted(skyrl_gym.registry))} "
        "(use one of them, or register the env: skyrl_gym.register or the `skyrl_gym.envs` entry-point group)"
    )


async def _init_then_close(env, messages) -> None:
    try:
        await _call(env, "init", messages)
    finally:
        await _call(env, "close")


async def _call(env, hook: str, *args):
    if skyrl_gym.implements_async(env, hook):
        return await getattr(env, f"{hook}_async")(*args)
    return getattr(env, hook)(*args)
