"""LoRA adapters from a ``model.lora`` config block (peft), for the workers, the engines and the weight sync alike."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from skyrl_train.config.schema import LoraConfig

__all__ = ["apply_lora", "peft_lora_config"]


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
