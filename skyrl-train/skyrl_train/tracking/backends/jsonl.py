"""JSONL backend: ``metrics.jsonl`` gets one JSON object per `log` call, written, flushed and fsync'd before
`log` returns, so a process killed right after (even SIGKILL) keeps every completed step.

A line is ``{"step": 3, "timestamp": <unix seconds>, "<metric>": value, ...}``. The file is strict JSON:
NaN and +/-inf are written as ``null``. Strings are kept. The file is opened for appending, so a resumed run
continues it; readers keep the last value logged for a step. ``config.json`` holds the (redacted) config.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from skyrl_train.tracking.backends import Backend
from skyrl_train.tracking.values import StepMetrics

METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"
RESERVED_KEYS = ("step", "timestamp")


class JsonlBackend(Backend):
    def __init__(self, output_dir: Path, config: dict[str, Any] | None) -> None:
        output_dir.mkdir(parents=True, exist_ok=True)
        if config is not None:
            (output_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2, default=str) + "\n")
        self.path = output_dir / METRICS_FILE
        self._file = self.path.open("a", encoding="utf-8")

    def log(self, step: int, metrics: StepMetrics) -> None:
        clash = [k for k in RESERVED_KEYS if k in metrics.scalars or k in metrics.texts]
        if clash:
            raise ValueError(f"metric names {clash} are reserved by {METRICS_FILE}; rename them")
        record: dict[str, Any] = {"step": step, "timestamp": time.time()}
        record.update({k: v if math.isfinite(v) else None for k, v in metrics.scalars.items()})
        record.update(metrics.texts)
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()
