"""The weights the hf engine decodes with while it is busy: a LoRA adapter folded in, every weight in its dtype.

The engine shares the trainer's module. With bf16 on the CPU (`skyrl_train.utils.device.Precision`) the trainer keeps
fp32 weights and computes under autocast, while the engine decodes with bf16 weights: when it starts generating,
`DecodeWeights` replaces every floating-point parameter's tensor by a bf16 copy (an adapted LoRA layer's base weight
by ``W + s B A`` summed in fp32 and rounded once, `lora_merge.MergedLoRA`), and `restore` puts the very fp32 tensors
back when the batch drains. Nothing is ever cast back, so the fp32 weights stay the source of truth: however many
generate / update rounds a run makes, the trainer's weights are bit for bit what its optimizer left, and the engine's
are one rounding of them, never an accumulation of roundings.

Costs, while the engine is busy, one copy of the weights in the engine's dtype; a module already in that dtype is
left as it is (no copy).

The linear layers of float32 weights on the CPU also take few-row inputs as ``(W @ xᵀ)ᵀ`` meanwhile
(`few_row_linear`): the same product, read faster from memory.
"""

from __future__ import annotations

import torch
from torch import nn

from skyrl_train.inference_engines.hf.few_row_linear import FewRowLinears
from skyrl_train.inference_engines.hf.lora_merge import MergedLoRA

__all__ = ["DecodeWeights"]


class DecodeWeights:
    """``model``'s weights for decoding, until `restore`: LoRA folded (``fold_lora``, `MergedLoRA`), every
    floating-point parameter in ``dtype`` (None: as they are), and float32 linear layers on the CPU in their few-row
    form (`FewRowLinears`)."""

    @torch.no_grad()
    def __init__(self, model: nn.Module, *, fold_lora: bool, dtype: torch.dtype | None):
        self._merged = MergedLoRA(model, dtype) if fold_lora else None
        self._originals: list[tuple[nn.Parameter, torch.Tensor]] = []
        if dtype is not None:
            for param in model.parameters():  # a tied weight (embedding and LM head) is one parameter, cast once
                if param.is_floating_point() and param.dtype != dtype:
                    self._originals.append((param, param.data))
                    param.data = param.data.to(dtype)
        self._few_row_linears = FewRowLinears(model)  # after the cast: it decides by the dtype decoded in

    def restore(self) -> None:
        """Put the module's own weight tensors back, switch folded adapters on again, and the linear layers back to
        their own forward."""
        self._few_row_linears.restore()
        for param, original in reversed(self._originals):
            param.data = original
        self._originals = []
        if self._merged is not None:
            self._merged.restore()
            self._merged = None
