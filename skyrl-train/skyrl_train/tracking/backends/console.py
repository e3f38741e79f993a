"""Console backend: one compact line per step with the key metrics (`metric_keys.CONSOLE_KEYS`).

Lines go through ``tqdm.write`` so they print above a running `step_progress` bar instead of breaking it.
"""

from __future__ import annotations

import sys

from tqdm import tqdm

from skyrl_train.tracking.backends import Backend
from skyrl_train.tracking.metric_keys import console_keys
from skyrl_train.tracking.values import StepMetrics


def format_step_line(step: int, metrics: StepMetrics) -> str:
    """``step 3 | reward/avg_raw_reward=0.3125 | timing/step=12.5 | +7 more``."""
    shown = console_keys(metrics.scalars)
    parts = [f"step {step}"] + [f"{k}={metrics.scalars[k]:.4g}" for k in shown]
    hidden = len(metrics.scalars) + len(metrics.texts) - len(shown)
    if hidden:
        parts.append(f"+{hidden} more")
    return " | ".join(parts)


class ConsoleBackend(Backend):
    def log(self, step: int, metrics: StepMetrics) -> None:
        tqdm.write(format_step_line(step, metrics), file=sys.stdout)
        sys.stdout.flush()

    def close(self) -> None:
        pass
