"""Decode with a LoRA adapter folded into the base weights, leaving the trainer's weights untouched.

A peft LoRA layer computes ``W x + s B (A x)``: per decode step and per adapted linear layer, four extra small ops
(two thin matmuls, a scale, an add) on top of the base matmul; on the CPU default model (every linear layer adapted)
that doubled the time of a decode step. `MergedLoRA` replaces, for the time the engine is busy, each adapted layer's
base weight by a new tensor ``W + s B A`` and switches the adapter branch off, so a layer is one matmul. The original
weight tensors are kept and put back by `restore` (never ``W' − s B A``, which would not give ``W`` back bit for
bit), so training sees exactly the weights it had. Outputs equal the adapter's up to float rounding.

The merged weight keeps the base weight's device, and its dtype unless another is asked for (the engine's bf16 over
fp32 weights, `decode_weights`): with a bf16 base, peft keeps the adapter in fp32 by default
(``autocast_adapter_dtype``) and its ``get_delta_weight`` returns fp32, so ``W + s B A`` is summed in fp32 and rounded
to bf16 once (a bf16 x fp32 matmul in the next forward pass would fail otherwise); over an fp32 base it is likewise
summed in fp32 and rounded once to the dtype asked for.

Only plain LoRA on ``nn.Linear`` with an active adapter (no DoRA or other variants, not already merged or disabled)
is folded; other layers keep computing their adapter as usual.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["MergedLoRA"]


def _foldable(module: nn.Module) -> bool:
    from peft.tuners.lora.layer import Linear as LoraLinear

    return (
        isinstance(module, LoraLinear)
        and not module.merged
        and not module.disable_adapters
        and not any(name in module.lora_variant for name in module.active_adapters)
        and any(name in module.lora_A for name in module.active_adapters)
    )


class MergedLoRA:
    """Folds every foldable LoRA layer of ``model`` into a merged copy of its base weight, in ``dtype`` (None: the base
    weight's; see the module docstring) until `restore`. Costs one weight-sized tensor per adapted layer while it
    lasts."""

    @torch.no_grad()
    def __init__(self, model: nn.Module, dtype: torch.dtype | None = None):
        self._folded: list[tuple[nn.Module, torch.Tensor]] = []
        for module in model.modules():
            if not _foldable(module):
                continue
            weight = module.base_layer.weight
            delta = sum(module.get_delta_weight(name) for name in module.active_adapters if name in module.lora_A)
            self._folded.append((module, weight.data))
            weight.data = (weight.data + delta.to(weight.device)).to(dtype or weight.dtype)
            module._disable_adapters = True

    @property
    def layers(self) -> int:
        """How many LoRA layers are folded."""
        return len(self._folded)

    def restore(self) -> None:
        """Put the original base weights back and switch the adapters on again."""
        for module, original in reversed(self._folded):
            module.base_layer.weight.data = original
            module._disable_adapters = False
        self._folded = []
