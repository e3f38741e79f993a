"""LoRA hand-off: the trainer saves its adapter in peft's format (`skyrl_train.models.lora.save_adapter`, re-exported
here); engines load it from that folder."""

from __future__ import annotations

import shutil
from pathlib import Path

from skyrl_train.models.lora import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, save_adapter

__all__ = [
    "ADAPTER_CONFIG_FILE",
    "ADAPTER_WEIGHTS_FILE",
    "adapter_folder",
    "remove_older_adapters",
    "same_adapter_layout",
    "save_adapter",
]


def adapter_folder(lora_sync_path: str | Path, weight_version: int) -> Path:
    """Where the adapter of `weight_version` is written: one folder per version, so an engine that caches adapters
    by path never mistakes a new adapter for an old one."""
    return Path(lora_sync_path).expanduser() / f"weight_version_{weight_version}"


def same_adapter_layout(a, b) -> bool:
    """Two peft LoRA configs give the same layers (so one adapter's weights can replace the other's)."""
    keys = (
        "r",
        "lora_alpha",
        "target_modules",
        "exclude_modules",
        "use_rslora",
        "use_dora",
        "rank_pattern",
        "alpha_pattern",
    )
    return all(_normalised(getattr(a, key, None)) == _normalised(getattr(b, key, None)) for key in keys)


def _normalised(value):
    return sorted(value) if isinstance(value, set | list | tuple) else value


def remove_older_adapters(lora_sync_path: str | Path, keep: Path) -> None:
    """Delete the adapter folders of earlier versions under `lora_sync_path` (every one but `keep`)."""
    for folder in Path(lora_sync_path).expanduser().glob("weight_version_*"):
        if folder.is_dir() and folder.resolve() != Path(keep).resolve():
            shutil.rmtree(folder, ignore_errors=True)
