"""Experiment tracking: console, JSONL, TensorBoard, W&B and MLflow backends behind one `Tracking` object.

    with Tracking("skyrl", "run1", backends=["console", "jsonl"], config=cfg, output_dir="runs/run1") as tracker:
        tracker.log({"reward/avg_raw_reward": 0.4}, step=1)

The run report (plots + summary from ``metrics.jsonl``) is `skyrl_train.tracking.report.write_report`, or
``python -m skyrl_train.tracking.report runs/run1``; it is not imported here, so training never loads matplotlib.
"""

from skyrl_train.tracking.progress import step_progress
from skyrl_train.tracking.tracker import Tracking
from skyrl_train.utils.redact import is_secret_name, redact_secrets

__all__ = ["Tracking", "is_secret_name", "redact_secrets", "step_progress"]
