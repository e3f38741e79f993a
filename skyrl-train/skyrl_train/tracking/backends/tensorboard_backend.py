"""TensorBoard backend: scalars via ``torch.utils.tensorboard.SummaryWriter``, flushed after every step.

NaN/inf are written as they are. The config is stored once as a text summary named ``config``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

from skyrl_train.tracking.backends import Backend
from skyrl_train.tracking.values import StepMetrics


class TensorBoardBackend(Backend):
    def __init__(self, log_dir: Path, config: dict[str, Any] | None) -> None:
        self.log_dir = log_dir
        self._writer = SummaryWriter(log_dir=str(log_dir))
        if config is not None:
            # Markdown code block: TensorBoard renders text summaries as markdown.
            self._writer.add_text("config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```", 0)
            self._writer.flush()

    def log(self, step: int, metrics: StepMetrics) -> None:
        for key, value in metrics.scalars.items():
            self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
