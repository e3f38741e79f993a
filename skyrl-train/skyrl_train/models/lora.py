"""LoRA adapters from a ``model.lora`` config block (peft), for the workers, the engines and the weight sync alike,
and the adapter folder in peft's own format that checkpoints, HF exports and the LoRA weight sync write."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

    from skyrl_train.config.schema import LoraConfig

__all__ = [
    "ADAPTER_CONFIG_FILE",
    "ADAPTER_DIR",
    "ADAPTER_WEIGHTS_FILE",
    "apply_lora",
    "changes_base_weights",
    "peft_lora_config",
    "save_adapter",
    "write_peft_adapter",
]

logger = logging.getLogger(__name__)

ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_NAME = "default"
"""The adapter name peft gives the policy's adapter (``get_peft_model``'s default)."""
ADAPTER_DIR = "adapter"
"""Subfolder of a LoRA policy's checkpoint (``global_step_N/policy/adapter/``) and of its HF export
(``<export_path>/global_step_N/policy/adapter/``, beside the merged model) that holds the PEFT adapter."""
_BASE_CHANGING_INITS = re.compile(r"pissa(_niter_\d+)?|olora")
"""peft inits that subtract the initial adapter from the base weights, so the adapter alone does not apply to the
unchanged base model."""


def apply_lora(model: nn.Module, lora_config: LoraConfig, task_type: str | None) -> nn.Module:
    """Wrap ``model`` with a fresh peft LoRA adapter from a ``model.lora`` config; only adapter weights train."""
    from peft import get_peft_model

    return get_peft_model(model, peft_lora_config(lora_config, task_type))


def peft_lora_config(lora_config: LoraConfig, task_type: str | None):
    """The peft ``LoraConfig`` of a ``model.lora`` config.

    ``init_method: kaiming`` is peft's default init (A Kaiming-uniform, B zero, so the adapted model starts
    equal to the base); any other value is passed to peft's ``init_lora_weights`` (e.g. ``gaussian``).
    """
    from peft import LoraConfig as PeftLoraConfig

    def names(value: Any) -> Any:
        return value if value is None or isinstance(value, str) else list(value)

    init_method = lora_config.init_method
    return PeftLoraConfig(
        r=lora_config.rank,
        lora_alpha=lora_config.alpha,
        lora_dropout=lora_config.dropout,
        target_modules=names(lora_config.target_modules),
        exclude_modules=names(lora_config.exclude_modules),
        init_lora_weights=True if init_method == "kaiming" else init_method,
        task_type=task_type,
    )


def changes_base_weights(init_method: str) -> bool:
    """Whether the LoRA init ``init_method`` (pissa, pissa_niter_<n>, olora) also rewrites the base weights."""
    return _BASE_CHANGING_INITS.fullmatch(str(init_method)) is not None


def save_adapter(
    state: dict[str, torch.Tensor], folder: str | Path, lora_config: LoraConfig, base_model_path: str
) -> Path:
    """Write the policy's adapter weights `state` (named as in the training ``PeftModel``, e.g.
    ``base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight``) and its config in the folder layout
    ``PeftModel.save_pretrained`` writes (``adapter_config.json`` + ``adapter_model.safetensors``, weights named
    without the adapter name, as peft saves them), so vLLM, peft and transformers' ``load_adapter`` read it."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # peft drops the adapter name from the keys it saves (".lora_A.default.weight" -> ".lora_A.weight").
    weights = {name.replace(f".{ADAPTER_NAME}", ""): t.detach().to("cpu").contiguous() for name, t in state.items()}
    save_file(weights, str(folder / ADAPTER_WEIGHTS_FILE), metadata={"format": "pt"})
    config = peft_lora_config(lora_config, task_type="CAUSAL_LM")
    config.base_model_name_or_path = base_model_path
    config.save_pretrained(str(folder))
    return folder


def write_peft_adapter(
    state: dict[str, torch.Tensor], folder: str | Path, lora_config: LoraConfig, base_model_path: str
) -> Path | None:
    """`save_adapter` for a checkpoint or an export, which ``PeftModel.from_pretrained(base, folder)`` loads onto the
    unchanged base model; None, with a warning, for an init that rewrote the base weights (`changes_base_weights`):
    that adapter only reproduces the policy on the rewritten base, and the merged export is the model to use."""
    if changes_base_weights(lora_config.init_method):
        logger.warning(
            "no PEFT adapter written to %s: model.lora.init_method=%s rewrote the base weights, so the adapter alone "
            "does not apply to %s (the merged HF export does hold the trained model)",
            folder,
            lora_config.init_method,
            base_model_path,
        )
        return None
    return save_adapter(state, folder, lora_config, base_model_path)
