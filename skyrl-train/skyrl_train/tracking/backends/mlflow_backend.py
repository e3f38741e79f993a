"""MLflow backend (``trainer.logger`` lists ``mlflow``): the config as the run's params, each step's numbers as metrics
at that step.

Where: ``MLFLOW_TRACKING_URI`` when set (a tracking server, ``sqlite:///...``, a folder), else a file store in
``<output_dir>/mlruns``, which needs no server and no network (full ``mlflow``'s ``mlflow ui --backend-store-uri
<that folder>`` shows it; this package installs only the client, ``mlflow-skinny``). MLflow 3 keeps its file store
in maintenance mode behind ``MLFLOW_ALLOW_FILE_STORE``; for a file store this backend sets that to true in its own
process unless the environment already sets it. The experiment is the project name, the run name the run name.

Params are the config `Tracking` hands over (already redacted by `skyrl_train.utils.redact`), flattened to dotted keys
(``trainer.policy.model.path``); values longer than MLflow's limit are cut, ending in ``...``. Metric names keep
MLflow's characters (letters, digits, ``_ - . / :`` and spaces); any other character becomes ``_``
(``eval/all/pass@4`` -> ``eval/all/pass_4``). NaN/inf are sent as they are; strings are dropped.

Resume: like W&B, the run id is kept in checkpoints (`state`), and a run resumed from one logs into the same MLflow run
(`resume`; a store that no longer has that run gets a new one, with a warning). The run is created at the first `log`
(or `state`), once the trainer knows whether it resumes.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mlflow.entities import Metric, Param, RunStatus
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import MAX_METRICS_PER_BATCH, MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

from skyrl_train.tracking.backends import Backend
from skyrl_train.tracking.values import StepMetrics

logger = logging.getLogger(__name__)

STORE_DIR = "mlruns"
_NOT_IN_NAMES = re.compile(r"[^\w./\- :]")


def tracking_uri(output_dir: Path, environ: Mapping[str, str]) -> str:
    """``MLFLOW_TRACKING_URI``, else the file store ``<output_dir>/mlruns`` (as a ``file://`` URI)."""
    return environ.get("MLFLOW_TRACKING_URI") or (output_dir / STORE_DIR).resolve().as_uri()


def is_file_store(uri: str) -> bool:
    return urlparse(uri).scheme in ("", "file")


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config dicts as ``{"a.b.c": "value"}``; values cut to MLflow's length limit."""
    params = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            params.update(flat_params(value, f"{name}."))
            continue
        text = str(value)
        params[name] = text if len(text) <= MAX_PARAM_VAL_LENGTH else text[: MAX_PARAM_VAL_LENGTH - 3] + "..."
    return params


def metric_name(key: str) -> str:
    """`key` with every character MLflow refuses in a metric name replaced by ``_``."""
    return _NOT_IN_NAMES.sub("_", key)


class MlflowBackend(Backend):
    def __init__(self, project_name: str, run_name: str, output_dir: Path, config: dict[str, Any] | None) -> None:
        self.uri = tracking_uri(output_dir, os.environ)
        if is_file_store(self.uri):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=self.uri)
        experiment = self.client.get_experiment_by_name(project_name)
        self.experiment_id = (
            experiment.experiment_id if experiment is not None else self.client.create_experiment(project_name)
        )
        self.run_name = run_name
        self.config = config
        self.run_id: str | None = None

    def state(self) -> dict[str, str]:
        return {"run_id": self._started()}

    def resume(self, state: Mapping[str, str]) -> None:
        if self.run_id is not None:
            raise RuntimeError("the MLflow run already started: resume() must come before the first log()")
        try:
            self.client.get_run(state["run_id"])
        except MlflowException as exc:  # e.g. a file store left on another machine
            logger.warning(
                "MLflow: cannot resume run %s (%s): starting a new run in %s", state["run_id"], exc, self.uri
            )
            return
        self.run_id = state["run_id"]
        self.client.update_run(self.run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        logger.info("MLflow: resuming run %s in %s", self.run_id, self.uri)

    def _started(self) -> str:
        if self.run_id is None:
            run = self.client.create_run(self.experiment_id, run_name=self.run_name)
            self.run_id = run.info.run_id
            params = [Param(k, v) for k, v in flat_params(self.config or {}).items()]
            for i in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
                self.client.log_batch(self.run_id, params=params[i : i + MAX_PARAMS_TAGS_PER_BATCH])
            logger.info("MLflow: run %s (experiment %s) in %s", self.run_id, self.experiment_id, self.uri)
        return self.run_id

    def log(self, step: int, metrics: StepMetrics) -> None:
        run_id = self._started()
        now = int(time.time() * 1000)
        batch = [Metric(metric_name(k), v, now, step) for k, v in metrics.scalars.items()]
        for i in range(0, len(batch), MAX_METRICS_PER_BATCH):
            self.client.log_batch(run_id, metrics=batch[i : i + MAX_METRICS_PER_BATCH])

    def close(self) -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id)
