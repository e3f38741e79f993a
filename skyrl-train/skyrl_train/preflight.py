"""Setup checks that need no model weights, in one module: the training preflight and the `validate` command.

`check_envs` runs before the model loads (training and `main_generate`). During training an env that cannot start
becomes an infrastructure-failure placeholder (the generator never crashes a batch), which is right for a tool
server that hiccups and wrong for a setup that can never work: an unknown env id, a row whose `reward_spec` the env
cannot read, a file named in an env config that does not exist. Those would turn every trajectory into a placeholder
and the run would "train" on nothing. `check_envs` finds them first: it resolves every env class named by the config
(`environment.env_class`) and the data (a row's `env_class`) and runs each env's `init` (then `close`) on the first
rows of each (data source, env class), through the generator's `EnvRunner` (the same env config block, extras and
sync/async bridge as training). It raises `PreflightError` naming the env, the dataset file and row, and the env's
own error (which names the field or file at fault).

`validate_setup` (`python -m skyrl_train.entrypoints.validate <same overrides as training>`) checks, in order, and
reports every failure (exit status 1 if any):
1. the config (unknown keys, types, cross-key rules);
2. the tokenizer and model config of `trainer.policy.model.path` (weights are not loaded);
3. the dataset files (every row's columns; prompts within `trainer.max_prompt_length` after templating);
4. the env checks of `check_envs`, each env also given one `step` with an empty action.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import skyrl_gym
from skyrl_train.config import ConfigError, load_config
from skyrl_train.config.schema import SkyRLConfig
from skyrl_train.dataset import PromptDataset
from skyrl_train.generators.env_runner import EnvRunner, InfraFailed

__all__ = ["PreflightError", "ROWS_PER_SOURCE", "check_envs", "validate_setup"]

ROWS_PER_SOURCE = 2
"""Rows per (data source, env class) whose env the checks run."""


class PreflightError(RuntimeError):
    """An env cannot run on the run's data: the message names the env, the dataset file and row, and the cause."""


class UnknownEnvError(LookupError):
    """No env is registered under an id the config or the data names."""


@dataclass(frozen=True)
class EnvCheck:
    """The env of one dataset row, to be made, initialised (and stepped) and closed."""

    dataset_key: str
    """The caller's name of the dataset ("data.train_data", "train", ...)."""
    dataset: PromptDataset
    index: int
    env_class: str

    def origin(self) -> str:
        source, row = self.dataset.origin(self.index)
        return f"{self.dataset_key} {source} row {row} (env_class {self.env_class!r})"


def check_env_class(cfg: SkyRLConfig) -> str:
    """`environment.env_class` names a registered env (else `UnknownEnvError`)."""
    skyrl_gym.load_entry_point_envs()
    if cfg.environment.env_class not in skyrl_gym.registry:
        raise UnknownEnvError(_unknown(cfg.environment.env_class))
    return "registered"


def env_checks(
    cfg: SkyRLConfig, datasets: Mapping[str, PromptDataset | None], rows_per_source: int = ROWS_PER_SOURCE
) -> list[EnvCheck]:
    """The first `rows_per_source` rows of each (data source, env class) of each dataset (None ones skipped).
    Registers the envs of installed packages first, so `run_env_check` sees them."""
    skyrl_gym.load_entry_point_envs()
    checks = []
    for key, dataset in datasets.items():
        if dataset is None:
            continue
        taken: dict[tuple[str | None, str], int] = {}
        for index in range(len(dataset)):
            _, env_class, extras, _ = dataset[index]
            env_class = env_class or cfg.environment.env_class
            group = (extras.get("data_source"), env_class)
            if taken.get(group, 0) < rows_per_source:
                taken[group] = taken.get(group, 0) + 1
                checks.append(EnvCheck(key, dataset, index, env_class))
    return checks


def run_env_check(runner: EnvRunner, check: EnvCheck, step_action: str | None = None) -> str:
    """Make the row's env, `init` it on the row's prompt, `step(step_action)` unless None, and close it; returns
    what happened in one line. Raises `UnknownEnvError`, or `InfraFailed` with the env's own error."""
    if check.env_class not in skyrl_gym.registry:
        raise UnknownEnvError(_unknown(check.env_class))
    messages, _, extras, _ = check.dataset[check.index]
    return asyncio.run(_episode(runner, check.env_class, messages, extras, step_action))


def check_envs(
    cfg: SkyRLConfig, datasets: Mapping[str, PromptDataset | None], rows_per_source: int = ROWS_PER_SOURCE
) -> list[str]:
    """The training preflight (module doc) on every dataset (`{"data.train_data": train, "data.val_data": val}`);
    returns one line per env init that passed, raises `PreflightError` listing every failure."""
    passed, problems = [], []
    try:
        check_env_class(cfg)
    except UnknownEnvError as exc:
        problems.append(f"environment.env_class={cfg.environment.env_class!r}: {exc}")
    runner = _runner(cfg)
    try:
        for check in env_checks(cfg, datasets, rows_per_source):
            try:
                run_env_check(runner, check)
            except UnknownEnvError as exc:
                problems.append(f"{check.origin()}: {exc}")
            except InfraFailed as exc:
                problems.append(f"{check.origin()}: env init failed: {exc.failure.error}")
            else:
                passed.append(f"{check.origin()}: init ok")
    finally:
        runner.shutdown()
    if problems:
        raise PreflightError(
            "the environments cannot run on this data (checked before loading the model):\n  - "
            + "\n  - ".join(problems)
        )
    return passed


class Checks:
    """Runs named checks, printing one line each; remembers whether any failed."""

    def __init__(self, out=sys.stdout):
        self.out = out
        self.failed = 0

    def run(self, name: str, check: Callable[[], Any], describe: Callable[[Any], str] = str) -> Any:
        """Run `check`; print `ok <name>: <describe(result)>` or `FAIL <name>: <error>`. Returns the result or None."""
        try:
            result = check()
        except Exception as exc:  # a validation tool reports every failure instead of stopping at the first
            self.failed += 1
            error = exc.failure.error if isinstance(exc, InfraFailed) else f"{type(exc).__name__}: {exc}"
            print(f"FAIL {name}: {error}", file=self.out)
            return None
        print(f"ok   {name}: {describe(result)}", file=self.out)
        return result


def validate_setup(overrides: list[str], out=sys.stdout) -> int:
    """The `validate` command's checks (module doc) for these config overrides; returns the exit status."""
    checks = Checks(out)
    try:
        cfg = load_config(overrides)
    except ConfigError as exc:
        print(f"FAIL config:\n{exc}", file=out)
        return 1
    print("ok   config", file=out)

    from transformers import AutoConfig

    from skyrl_train.models import load_tokenizer, resolve_model_path

    model = cfg.trainer.policy.model.path
    tokenizer = checks.run(f"tokenizer of {model}", lambda: load_tokenizer(model), lambda t: f"vocab {len(t)}")
    checks.run(
        f"model config of {model}",
        lambda: AutoConfig.from_pretrained(resolve_model_path(model)),
        lambda c: f"{c.model_type}, {getattr(c, 'num_hidden_layers', '?')} layers",
    )
    if tokenizer is None:
        return 1
    checks.run(f"environment.env_class={cfg.environment.env_class!r}", lambda: check_env_class(cfg))
    runner = _runner(cfg)
    try:
        for split, files in (("train", cfg.data.train_data), ("val", cfg.data.val_data)):
            if not files:
                continue
            dataset = checks.run(
                f"{split} data {list(files)}",
                lambda files=files: PromptDataset(files, tokenizer, cfg.trainer.max_prompt_length),
                lambda d: f"{len(d)} rows",
            )
            for check in env_checks(cfg, {split: dataset}):
                checks.run(
                    f"{split} env {check.env_class!r} (row {check.index})",
                    lambda check=check: run_env_check(runner, check, step_action=""),
                )
    finally:
        runner.shutdown()
    print(f"{checks.failed} check(s) failed" if checks.failed else "all checks passed", file=out)
    return 1 if checks.failed else 0


def _runner(cfg: SkyRLConfig) -> EnvRunner:
    return EnvRunner(cfg.environment.skyrl_gym, cfg.generator.max_turns)


async def _episode(runner: EnvRunner, env_class: str, messages, extras, step_action: str | None) -> str:
    session = runner.open(env_class, extras)
    try:
        prompt, _ = await session.init(messages)
        summary = f"init -> {len(prompt)} messages"
        if step_action is not None:
            step = await session.step(step_action)
            summary += f"; step({step_action!r}) -> reward={step['reward']}, done={step['done']}"
        return summary
    finally:
        await session.close()


def _unknown(env_class: str) -> str:
    return (
        f"no env is registered under {env_class!r}; registered: {', '.join(sorted(skyrl_gym.registry))} "
        "(use one of them, or register the env: skyrl_gym.register or the `skyrl_gym.envs` entry-point group)"
    )
