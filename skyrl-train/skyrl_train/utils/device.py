"""Where a process's models run and in which dtype: the one place that decides `trainer.device` and `trainer.bf16`.

`trainer.device` names the device of the single-process workers and of the local `hf` engine: ``auto`` (CUDA when
this process sees a GPU, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``. fsdp2 ranks take their device from Ray.

`trainer.bf16` is ``null`` by default: bfloat16 on a GPU, and on a CPU with AMX bf16 (`cpu_has_amx_bf16`: Intel Xeon
since Sapphire Rapids; issue 46 measured a training forward + backward 1.8x as fast as fp32 on one); float32 on other
CPUs (where bf16 matmuls are several times slower than fp32); ``true`` or ``false`` force it either way. `precision`
turns that into what the models do:

- CUDA, bf16: weights in bf16 (fsdp2 ranks keep fp32 masters and compute in bf16, `distributed.fsdp`);
- CPU, bf16: fp32 weights, gradients and optimizer state; the training and reference forwards run under
  ``torch.autocast("cpu", torch.bfloat16)``, the LM head's logits, logprobs, entropy and losses in fp32; the local hf
  engine decodes with bf16 copies of the weights (made when it starts generating, the fp32 ones put back after);
- fp32: everything in float32.

torch is imported inside the functions: the config validation uses `check_device_name` without loading torch.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "AMX_BF16_FLAGS",
    "DEVICE_CHOICES",
    "Precision",
    "autocast_to",
    "available_devices",
    "check_device_name",
    "cpu_has_amx_bf16",
    "precision",
    "resolve_device",
    "training_dtype",
    "uses_bf16",
]

DEVICE_CHOICES = ("auto", "cpu", "cuda")
"""Accepted `trainer.device` values; ``cuda:N`` (a device index) is accepted too."""

AMX_BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})
"""The /proc/cpuinfo flags of a CPU whose bf16 matmuls (oneDNN's AMX kernels) beat fp32."""

CPUINFO = Path("/proc/cpuinfo")


def check_device_name(name: str) -> str | None:
    """What is wrong with `trainer.device` = ``name``, or None when it is well formed."""
    kind, _, index = name.partition(":")
    if name in DEVICE_CHOICES or (kind == "cuda" and index.isdigit()):
        return None
    return f"must be one of {', '.join(DEVICE_CHOICES)} or cuda:N, got {name!r}"


def resolve_device(name: str = "auto") -> torch.device:
    """The device `trainer.device` = ``name`` names on this machine (``cuda`` gets its index).

    Raises:
        ValueError: a malformed name, or a CUDA device this process cannot see.
    """
    import torch

    problem = check_device_name(name)
    if problem is not None:
        raise ValueError(f"trainer.device {problem}")
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(name.partition(":")[2] or (torch.cuda.current_device() if count else 0))
    if index >= count:
        raise ValueError(
            f"trainer.device={name} but this process sees {count} CUDA device(s); use trainer.device=auto or cpu"
        )
    return torch.device("cuda", index)


def cpu_has_amx_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU has every flag of `AMX_BF16_FLAGS` in the ``flags`` line of ``cpuinfo`` (the text of
    /proc/cpuinfo; None reads this machine's, once). No such file (not Linux) or no ``flags`` line: False."""
    if cpuinfo is None:
        return _this_cpu_has_amx_bf16()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split()) >= AMX_BF16_FLAGS
    return False


@functools.cache
def _this_cpu_has_amx_bf16() -> bool:
    try:
        return cpu_has_amx_bf16(CPUINFO.read_text())
    except OSError:
        return False


@dataclass(frozen=True)
class Precision:
    """How the models of one process on one device hold their weights and compute (see the module docstring)."""

    weights: torch.dtype
    """What the models load in and train: their weights, gradients and optimizer state."""
    autocast: torch.dtype | None
    """The dtype the training and reference forwards compute in under ``torch.autocast`` over ``weights``; None: they
    compute in ``weights``."""
    engine_cast: torch.dtype | None
    """The dtype the local hf engine casts the weights to while it generates (``HFInferenceEngine``'s ``dtype``);
    None: it decodes with the weights as they are."""
    reason: str
    """Which regime and why, for the start-up log."""

    @property
    def compute(self) -> torch.dtype:
        """The dtype the training matmuls run in."""
        return self.autocast or self.weights


def precision(bf16: bool | None, device: torch.device | str, cpuinfo: str | None = None) -> Precision:
    """What `trainer.bf16` = ``bf16`` means for models on ``device`` (``cpuinfo``: see `cpu_has_amx_bf16`)."""
    import torch

    on_cuda = str(device).startswith("cuda")
    if bf16 is not None:
        use_bf16, why = bf16, f"trainer.bf16={str(bf16).lower()}"
    elif on_cuda:
        use_bf16, why = True, "trainer.bf16 unset: bf16 on CUDA"
    elif cpu_has_amx_bf16(cpuinfo):
        use_bf16, why = True, "trainer.bf16 unset and the CPU has AMX bf16"
    else:
        use_bf16, why = False, "trainer.bf16 unset and the CPU has no AMX bf16"
    if not use_bf16:
        return Precision(torch.float32, None, None, f"float32 ({why})")
    if on_cuda:
        return Precision(torch.bfloat16, None, None, f"bfloat16 weights ({why})")
    return Precision(
        torch.float32,
        torch.bfloat16,
        torch.bfloat16,
        f"bf16 autocast over fp32 weights in training, bf16 weights in the hf engine ({why})",
    )


def uses_bf16(bf16: bool | None, device: torch.device | str) -> bool:
    """Whether models on ``device`` compute in bfloat16 (`precision`)."""
    import torch

    return precision(bf16, device).compute == torch.bfloat16


def training_dtype(bf16: bool | None, device: torch.device | str) -> torch.dtype:
    """The dtype a single-process model loads and trains its weights in on ``device`` (`precision`'s ``weights``)."""
    return precision(bf16, device).weights


def autocast_to(device: torch.device | str, dtype: torch.dtype | None) -> AbstractContextManager:
    """``torch.autocast`` to ``dtype`` on ``device``'s kind; a context that does nothing when ``dtype`` is None."""
    if dtype is None:
        return nullcontext()
    import torch

    return torch.autocast(torch.device(device).type, dtype=dtype)


def available_devices() -> list[str]:
    """``["cpu"]``, plus ``"cuda"`` when a GPU is visible: the devices a device-parameterised test runs on."""
    import torch

    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
