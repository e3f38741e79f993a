"""Setup checks that need no model weights, in one module: the training preflight and the `validate` command.

`check_envs` runs before the model loads (training and `main_generate`). During training an env that cannot start
becomes an infrastructure-failure placeholder (the generator never crashes a batch), which is right for a tool
server that hiccups and wrong for a setup that can never work: an unknown env id, a row whose `reward_spec` the env
cannot read, a file named in an env config that does not exist. Those would turn every trajectory into a placeholder
and the run would "train" on nothing. `check_envs` finds them first, through the generator's `EnvRunner` (the same
env config block, extras and sync/async bridge as training):
- it resolves the env class named by the config (`environment.env_class`);
- on EVERY row, it resolves the row's env class and makes the row's env (then closes it) without `init`: an env reads
  its row and its config block when it is made (upstream's `__init__(env_config, extras)`: `reward_spec`, required
  extras, files its config names such as demonstrations), so a row it cannot read fails here, whichever row it is;
- on the first `ROWS_PER_SOURCE` rows of each (data source, env class), it also runs the env's `init`, which may
  start tool servers or connect to services.
It raises `PreflightError` naming the env, the dataset file and row, and the env's own error (which names the field
or file at fault); past `MAX_LISTED_PROBLEMS` failing rows it gives their count.

`validate_setup` (`python -m skyrl_train.entrypoints.validate <same arguments as training>`) checks, in order, and
reports every failure (exit status 1 if any):
1. the config (unknown keys, types, cross-key rules);
2. the tokenizer and model config of `trainer.policy.model.path` (weights are not loaded);
3. the dataset files (every row's columns; prompts within `trainer.max_prompt_length` after templating);
4. the env checks of `check_envs` (every row's env made; `init` on the first rows of each source), each env
   initialised also given one `step` with an empty action.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import skyrl_gym
from skyrl_train.config import ConfigError, load_config, split_cli_args
from skyrl_train.config.schema import SkyRLConfig
from skyrl_train.dataset import PromptDataset
from skyrl_train.generators.env_runner import EnvRunner, InfraFailed

__all__ = ["PreflightError", "ROWS_PER_SOURCE", "MAX_LISTED_PROBLEMS", "check_envs", "validate_setup"]

ROWS_PER_SOURCE = 2
"""Rows per (data source, env class) whose env the checks `init` (every row's env is made)."""

MAX_LISTED_PROBLEMS = 20
"""Failing rows listed one per line in a `PreflightError`; any more are counted."""


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
    data_source: Any = None
    """The row's `data_source` column (None without one)."""

    def origin(self) -> str:
        source, row = self.dataset.origin(self.index)
        return f"{self.dataset_key} {source} row {row} (env_class {self.env_class!r})"


def check_env_class(cfg: SkyRLConfig) -> str:
    """`environment.env_class` names a registered env (else `UnknownEnvError`)."""
    skyrl_gym.load_entry_point_envs()
    if cfg.environment.env_class not in skyrl_gym.registry:
        raise UnknownEnvError(_unknown(cfg.environment.env_class))
    return "registered"


def row_checks(cfg: SkyRLConfig, datasets: Mapping[str, PromptDataset | None]) -> list[EnvCheck]:
    """Every row of each dataset (None ones skipped), with the env class it runs (`environment.env_class` for a row
    without one). Registers the envs of installed packages first, so the checks see them."""
    skyrl_gym.load_entry_point_envs()
    checks = []
    for key, dataset in datasets.items():
        for index in range(len(dataset) if dataset is not None else 0):
            _, env_class, extras, _ = dataset[index]
            checks.append(
                EnvCheck(key, dataset, index, env_class or cfg.environment.env_class, extras.get("data_source"))
            )
    return checks


def env_checks(
    cfg: SkyRLConfig, datasets: Mapping[str, PromptDataset | None], rows_per_source: int = ROWS_PER_SOURCE
) -> list[EnvCheck]:
    """The first `rows_per_source` rows of each (data source, env class) of each dataset: the rows whose env is
    initialised."""
    taken: Counter[tuple[str, Any, str]] = Counter()
    chosen = []
    for check in row_checks(cfg, datasets):
        group = (check.dataset_key, check.data_source, check.env_class)
        if taken[group] < rows_per_source:
            taken[group] += 1
            chosen.append(check)
    return chosen


def make_every_env(runner: EnvRunner, checks: list[EnvCheck]) -> list[tuple[EnvCheck, str]]:
    """Make (and close) the env of every row of `checks`, without `init`; returns each row that fails with why: an
    env id no env is registered under, or the env's own error."""

    async def make_and_close() -> list[tuple[EnvCheck, str]]:
        failures = []
        for check in checks:
            if check.env_class not in skyrl_gym.registry:
                failures.append((check, _unknown(check.env_class)))
                continue
            try:
                session = runner.open(check.env_class, check.dataset[check.index][2])
            except InfraFailed as exc:
                failures.append((check, f"the env rejects this row: {exc.failure.error}"))
                continue
            await session.close()
        return failures

    return asyncio.run(make_and_close())


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
    returns what passed, one line per check, and raises `PreflightError` listing every failure."""
    passed, problems = [], []
    try:
        check_env_class(cfg)
    except UnknownEnvError as exc:
        problems.append(f"environment.env_class={cfg.environment.env_class!r}: {exc}")
    runner = _runner(cfg)
    try:
        rows = row_checks(cfg, datasets)
        failures = make_every_env(runner, rows)
        problems += [f"{check.origin()}: {why}" for check, why in failures]
        passed.append(f"the env of each of {len(rows)} rows made")
        failed = {(check.dataset_key, check.index) for check, _ in failures}
        for check in env_checks(cfg, datasets, rows_per_source):
            if (check.dataset_key, check.index) in failed:
                continue
            try:
                run_env_check(runner, check)
            except InfraFailed as exc:
                problems.append(f"{check.origin()}: env init failed: {exc.failure.error}")
            else:
                passed.append(f"{check.origin()}: init ok")
    finally:
        runner.shutdown()
    if problems:
        raise PreflightError(
            "the environments cannot run on this data (checked before loading the model):" + _listing(problems)
        )
    return passed


def _all_made(rows: list[EnvCheck], failures: list[tuple[EnvCheck, str]]) -> int:
    """The number of rows, or `PreflightError` listing the rows whose env could not be made."""
    if failures:
        raise PreflightError(
            f"{len(failures)} of {len(rows)} rows:" + _listing([f"{check.origin()}: {why}" for check, why in failures])
        )
    return len(rows)


def _listing(problems: list[str]) -> str:
    """The problems one per line, at most `MAX_LISTED_PROBLEMS` of them, then how many more there are."""
    lines = problems[:MAX_LISTED_PROBLEMS]
    if len(problems) > MAX_LISTED_PROBLEMS:
        lines.append(f"... and {len(problems) - MAX_LISTED_PROBLEMS} more")
    return "\n  - " + "\n  - ".join(lines)


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


def validate_setup(args: list[str], out=sys.stdout) -> int:
    """The `validate` command's checks (module doc) for these `--config` presets and overrides; returns the exit
    status."""
    checks = Checks(out)
    try:
        presets, overrides = split_cli_args(args)
        cfg = load_config(overrides, presets=presets)
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
            if dataset is None:
                continue
            rows = row_checks(cfg, {split: dataset})
            failures = make_every_env(runner, rows)
            checks.run(
                f"{split} rows: the env of each row made",
                lambda rows=rows, failures=failures: _all_made(rows, failures),
                lambda count: f"{count} rows",
            )
            failed = {check.index for check, _ in failures}
            for check in env_checks(cfg, {split: dataset}):
                if check.index in failed:
                    continue
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
