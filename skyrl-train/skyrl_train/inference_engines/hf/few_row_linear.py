"""Linear layers over a few rows as ``(W @ xᵀ)ᵀ`` on the CPU, where MKL's ``x @ Wᵀ`` reads the weight slowly.

A decode step multiplies a few rows (the running sequences) by every weight of the model once, so it is bound by reading
the weights from memory: at SmolLM2-135M's fp32 weights (~540 MB, far above any cache) every step reads them all. On the
2-core development box (AMD EPYC, AVX2, MKL 2024.2 through torch 2.13), ``F.linear(x, W)`` for 2-32 rows read a cold
``[1536, 576]`` weight at 3-5 GB/s while the same product taken as ``W @ xᵀ`` mostly ran 1.2-2.6x faster, and 1.6-3.2x
for the ``[49152, 576]`` LM head; at one row (a matrix-vector product) and from ~512 rows on, the two forms took the
same time. In the hf engine, the GRPO-vs-TRL benchmark's generation (32 samples, LoRA folded) took 10% less time (median
of 8 interleaved pairs); the main job's multi-turn eval took the same time (docs/journal/cpu-step-profile.md).

`FewRowLinears` gives every plain ``nn.Linear`` of a module with float32 weights on the CPU that form for inputs of
`MIN_ROWS` to `MAX_ROWS` rows, until `restore`. The result is the same product, summed in another order: equal up to
float rounding. Other dtypes and devices keep the library's path (bf16 on CPUs with AMX and CUDA were not measured);
other CPUs take the form too, though it was measured on this one only.
"""

from __future__ import annotations

import types

import torch
from torch import nn

__all__ = ["MAX_ROWS", "MIN_ROWS", "FewRowLinears"]

MIN_ROWS = 2
"""One row is a matrix-vector product, as fast either way."""
MAX_ROWS = 256
"""Decode batches and short prefills; by ~512 rows the two forms took the same time."""


def _few_row_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if not MIN_ROWS <= rows <= MAX_ROWS:
        return nn.Linear.forward(self, x)
    out = torch.matmul(self.weight, x.reshape(rows, x.shape[-1]).T).T
    if self.bias is not None:
        out = out + self.bias
    return out.reshape(*x.shape[:-1], self.out_features)


def _applies(module: nn.Module) -> bool:
    return (
        type(module).forward is nn.Linear.forward
        and "forward" not in vars(module)
        and module.weight.device.type == "cpu"
        and module.weight.dtype == torch.float32
    )


class FewRowLinears:
    """Every plain float32 ``nn.Linear`` of ``model`` on the CPU computes few-row inputs as ``(W @ xᵀ)ᵀ`` (module
    docstring) until `restore`; an instance attribute, so other modules of the class are untouched."""

    def __init__(self, model: nn.Module):
        self._modules = [module for module in model.modules() if _applies(module)]
        for module in self._modules:
            module.forward = types.MethodType(_few_row_forward, module)

    @property
    def layers(self) -> int:
        """How many linear layers take the few-row form."""
        return len(self._modules)

    def restore(self) -> None:
        """Back to ``nn.Linear.forward`` for every layer."""
        for module in self._modules:
            del module.forward
        self._modules = []
