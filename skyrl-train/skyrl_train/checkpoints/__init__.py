"""Checkpoints in upstream's layout, written atomically, with resume and rotation."""

from skyrl_train.checkpoints.manager import (
    LATEST_CKPT_FILE,
    CheckpointError,
    CheckpointManager,
    ResumeMode,
    step_dir_name,
)

__all__ = ["LATEST_CKPT_FILE", "CheckpointError", "CheckpointManager", "ResumeMode", "step_dir_name"]
