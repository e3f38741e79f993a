"""Read a ``metrics.jsonl`` written by the JSONL backend back into per-step numbers.

Tolerant on purpose: a line that is not a JSON object with an integer ``step`` (for example the half-written
last line of a killed run) is skipped and reported in ``bad_lines``. Lines for the same step (train and eval
logged separately, or a resumed run) are merged, the later value winning. ``null`` (a NaN/inf when logged) reads
back as NaN; strings are left out.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class MetricsHistory:
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    timestamps: list[float] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)

    def keys(self) -> set[str]:
        return {k for values in self.steps.values() for k in values}

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """Steps (ascending) where ``key`` was logged, and its values there."""
        points = sorted((s, v[key]) for s, v in self.steps.items() if key in v)
        return [s for s, _ in points], [v for _, v in points]


def read_metrics(path: str | Path) -> MetricsHistory:
    history = MetricsHistory()
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                history.bad_lines.append(number)
                continue
            step = record.pop("step")
            timestamp = record.pop("timestamp", None)
            if isinstance(timestamp, int | float):
                history.timestamps.append(float(timestamp))
            values = history.steps.setdefault(step, {})
            for key, value in record.items():
                if value is None:
                    values[key] = math.nan
                elif isinstance(value, int | float) and not isinstance(value, bool):
                    values[key] = float(value)
    history.steps = dict(sorted(history.steps.items()))
    return history
