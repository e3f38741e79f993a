"""Tracking backends. Each one stores one step per `log` call and has it flushed before `log` returns.

A backend is built from a `RunInfo` and has two methods, ``log(step, metrics)`` and ``close()``. Third-party
libraries (tensorboard, wandb) are imported only when their backend is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from skyrl_train.tracking.values import StepMetrics


@dataclass(frozen=True)
class RunInfo:
    """What every backend is built from. ``config`` is already plain and secret-free (or None)."""

    project_name: str
    run_name: str
    output_dir: Path
    config: dict[str, Any] | None


class Backend(Protocol):
    def log(self, step: int, metrics: StepMetrics) -> None: ...

    def close(self) -> None: ...


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


BACKENDS: dict[str, Callable[[RunInfo], Backend]] = {
    "console": _console,
    "jsonl": _jsonl,
    "tensorboard": _tensorboard,
    "wandb": _wandb,
}
