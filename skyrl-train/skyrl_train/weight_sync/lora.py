"""LoRA hand-off: the trainer saves its adapter in peft's format; engines load it from that folder."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import save_file

from skyrl_train.models.lora import peft_lora_config

if TYPE_CHECKING:
    from skyrl_train.config.schema import LoraConfig

__all__ = [
    "ADAPTER_CONFIG_FILE",
    "ADAPTER_WEIGHTS_FILE",
    "adapter_folder",
    "remove_older_adapters",
    "same_adapter_layout",
    "save_adapter",
]

ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_NAME = "default"
"""The adapter name peft gives the policy's adapter (``get_peft_model``'s default)."""


def adapter_folder(lora_sync_path: str | Path, weight_version: int) -> Path:
    """Where the adapter of `weight_version` is written: one folder per version, so an engine that caches adapters
    by path never mistakes a new adapter for an old one."""
    return Path(lora_sync_path).expanduser() / f"weight_version_{weight_version}"


def save_adapter(
    state: dict[str, torch.Tensor], folder: str | Path, lora_config: LoraConfig, base_model_path: str
) -> Path:
    """Write the policy's adapter weights `state` (named as in the training ``PeftModel``, e.g.
    ``base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight``) and its config in the folder layout
    ``PeftModel.save_pretrained`` writes (``adapter_config.json`` + ``adapter_model.safetensors``, weights named
    without the adapter name, as peft saves them), so vLLM, peft and transformers' ``load_adapter`` read it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # peft drops the adapter name from the keys it saves (".lora_A.default.weight" -> ".lora_A.weight").
    weights = {name.replace(f".{ADAPTER_NAME}", ""): t.detach().to("cpu").contiguous() for name, t in state.items()}
    save_file(weights, str(folder / ADAPTER_WEIGHTS_FILE), metadata={"format": "pt"})
    config = peft_lora_config(lora_config, task_type="CAUSAL_LM")
    config.base_model_name_or_path = base_model_path
    config.save_pretrained(str(folder))
    return folder


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
