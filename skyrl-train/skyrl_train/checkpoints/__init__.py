"""Checkpoint folders in upstream's layout, written atomically, with resume and local rotation.

The S3 side (upload, rotation across local and S3, resume from S3) is `skyrl_train.storage.S3CheckpointSink`;
turning a checkpoint into a transformers model is `python -m skyrl_train.entrypoints.export_hf`. A LoRA policy's
checkpoint also holds its adapter in PEFT's format (`global_step_N/policy/adapter/`, `PolicyWorker.save_checkpoint`).
"""

from skyrl_train.checkpoints.manager import (
    LATEST_CKPT_FILE,
    CheckpointError,
    CheckpointManager,
    ResumeMode,
    step_dir_name,
)
from skyrl_train.checkpoints.sink import CheckpointSink

__all__ = [
    "LATEST_CKPT_FILE",
    "CheckpointError",
    "CheckpointManager",
    "CheckpointSink",
    "ResumeMode",
    "step_dir_name",
]
