"""`Tracking`: one object the trainer logs to; it fans each step out to the configured backends.

Same constructor shape as upstream SkyRL (``Tracking(project_name, run_name, backends=cfg.trainer.logger,
config=cfg)``) plus ``output_dir`` for the file-based backends.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from skyrl_train.config import to_dict
from skyrl_train.tracking.backends import BACKENDS, Backend, RunInfo
from skyrl_train.tracking.values import sort_metrics
from skyrl_train.utils.redact import redact_secrets

logger = logging.getLogger(__name__)


def _plain_config(config: Any) -> dict[str, Any] | None:
    """A typed config (dataclass), DictConfig or mapping as plain nested dicts."""
    if config is None:
        return None
    if isinstance(config, DictConfig):
        return OmegaConf.to_container(config, resolve=True)
    if isinstance(config, Mapping):
        return to_dict(dict(config))
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return to_dict(config)
    raise TypeError(f"config must be a dataclass, DictConfig or mapping, not {type(config).__name__}")


def _backend_names(backends: str | list[str] | tuple[str, ...]) -> list[str]:
    names = [backends] if isinstance(backends, str) else list(backends)
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise ValueError(f"unknown tracking backend(s) {unknown}; valid backends: {sorted(BACKENDS)}")
    return list(dict.fromkeys(names))


class Tracking:
    """Log one dict of metrics per step to every backend in ``backends``.

    ``backends``: one name or a list of names among ``console``, ``jsonl``, ``tensorboard``, ``wandb``, ``mlflow``.
    ``output_dir``: where ``metrics.jsonl``, ``config.json``, ``tensorboard/``, ``wandb/`` and ``mlruns/`` go;
    default ``runs/<project_name>/<run_name>`` (created only if a file backend is used). Given an ``output_dir``, the
    JSONL backend always runs, whatever ``backends`` lists: its ``metrics.jsonl`` is the run's exact record, which
    the run report reads.
    ``config`` is converted to plain dicts and stripped of secrets (`redact_secrets`) before any backend sees it.
    A run resumed from a checkpoint continues the W&B and MLflow runs of the run that wrote it: the checkpoint keeps
    `state()`, and `resume` hands it back before the first `log`.
    """

    def __init__(
        self,
        project_name: str,
        run_name: str,
        backends: str | list[str] | tuple[str, ...],
        config: Any = None,
        output_dir: str | Path | None = None,
    ) -> None:
        names = _backend_names(backends)
        if output_dir is not None and "jsonl" not in names:
            names.append("jsonl")
        out = Path(output_dir) if output_dir is not None else Path("runs") / project_name / run_name
        run = RunInfo(project_name, run_name, out, redact_secrets(_plain_config(config)))
        self.output_dir = out
        self.backends: dict[str, Backend] = {}
        self._closed = False
        self._logged = False
        self._warned: set[str] = set()
        try:
            for name in names:
                self.backends[name] = BACKENDS[name](run)
        except BaseException:
            self.finish()
            raise

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Send ``metrics`` (one step) to every backend; all of them have flushed it when this returns.

        Secret-named entries are redacted; strings reach JSONL only; lists, dicts and None are dropped with a
        warning (once per key). See `skyrl_train.tracking.values` for the NaN and type rules.
        """
        if self._closed:
            raise RuntimeError("Tracking.log() called after finish()")
        step = operator.index(step)
        sorted_metrics = sort_metrics(redact_secrets(metrics))
        for key in sorted_metrics.dropped:
            if key not in self._warned:
                self._warned.add(key)
                logger.warning("tracking: metric %r is not a number or string; not logged", key)
        self._logged = True
        for backend in self.backends.values():
            backend.log(step, sorted_metrics)

    def state(self) -> dict[str, dict[str, str]]:
        """Per backend with a run of its own (W&B, MLflow), what a checkpoint keeps to continue that run (its id)."""
        return {name: state for name, backend in self.backends.items() if (state := backend.state())}

    def resume(self, state: Mapping[str, Mapping[str, str]]) -> None:
        """Continue the runs a checkpoint's `state()` names, for the backends this run has; before the first `log`."""
        if self._logged:
            raise RuntimeError("Tracking.resume() called after log(): the backends' runs have started")
        for name, backend_state in state.items():
            if name in self.backends:
                self.backends[name].resume(backend_state)

    def finish(self) -> None:
        """Close every backend. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        for backend in self.backends.values():
            backend.close()

    def __enter__(self) -> Tracking:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()
