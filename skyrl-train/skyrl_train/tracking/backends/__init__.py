"""Tracking backends. Each one stores one step per `log` call and has it flushed before `log` returns.

A backend is built from a `RunInfo` and has ``log(step, metrics)`` and ``close()``; one that keeps a run of its own
in a tracking service (W&B, MLflow) also has ``state()`` (what a checkpoint keeps: the run's id) and ``resume(state)``
(continue that run instead of starting one). Third-party libraries (tensorboard, wandb, mlflow) are imported only when
their backend is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_train.tracking.values import StepMetrics


@dataclass(frozen=True)
class RunInfo:
    """What every backend is built from. ``config`` is already plain and secret-free (or None)."""

    project_name: str
    run_name: str
    output_dir: Path
    config: dict[str, Any] | None


class Backend:
    """What `Tracking` calls. ``state`` and ``resume`` do nothing for a backend without a run of its own."""

    def log(self, step: int, metrics: StepMetrics) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def state(self) -> dict[str, str]:
        """What a checkpoint keeps so that a resumed run continues this backend's run ({} when there is none)."""
        return {}

    def resume(self, state: Mapping[str, str]) -> None:
        """Continue the run `state` (this backend's `state()` in a checkpoint) instead of starting a new one; called
        before the first `log`."""


def _console(run: RunInfo) -> Backend:
    from skyrl_train.tracking.backends.console import ConsoleBackend

    return ConsoleBackend()


def _jsonl(run: RunInfo) -> Backend:
    from skyrl_train.tracking.backends.jsonl import JsonlBackend

    return JsonlBackend(run.output_dir, run.config)


def _tensorboard(run: RunInfo) -> Backend:
    from skyrl_train.tracking.backends.tensorboard_backend import TensorBoardBackend

    return TensorBoardBackend(run.output_dir / "tensorboard", run.config)


def _wandb(run: RunInfo) -> Backend:
    from skyrl_train.tracking.backends.wandb_backend import WandbBackend

    return WandbBackend(run.project_name, run.run_name, run.output_dir, run.config)


def _mlflow(run: RunInfo) -> Backend:
    from skyrl_train.tracking.backends.mlflow_backend import MlflowBackend

    return MlflowBackend(run.project_name, run.run_name, run.output_dir, run.config)


BACKENDS: dict[str, Callable[[RunInfo], Backend]] = {
    "console": _console,
    "jsonl": _jsonl,
    "tensorboard": _tensorboard,
    "wandb": _wandb,
    "mlflow": _mlflow,
}
