"""Checkpoints in upstream's layout, written atomically, with resume and rotation; optional S3 sink."""

from skyrl_train.checkpoints.manager import (
    LATEST_CKPT_FILE,
    CheckpointError,
    CheckpointManager,
    ResumeMode,
    step_dir_name,
)
from skyrl_train.checkpoints.rotation import CheckpointState, RotationPlan, plan_rotation
from skyrl_train.checkpoints.s3_sink import S3CheckpointSink
from skyrl_train.checkpoints.sink import CheckpointSink

__all__ = [
    "LATEST_CKPT_FILE",
    "CheckpointError",
    "CheckpointManager",
    "CheckpointSink",
    "CheckpointState",
    "ResumeMode",
    "RotationPlan",
    "S3CheckpointSink",
    "plan_rotation",
    "step_dir_name",
]
