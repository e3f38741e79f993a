"""Where a process's models run and in which dtype: the one place that decides `trainer.device` and `trainer.bf16`.

`trainer.device` names the device of the single-process workers and of the local `hf` engine: ``auto`` (CUDA when
this process sees a GPU, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``. fsdp2 ranks take their device from Ray.

`trainer.bf16` is ``null`` by default: bfloat16 on a GPU, float32 on the CPU (where bf16 matmuls are several times
slower without AMX); ``true`` or ``false`` force it either way.

torch is imported inside the functions: the config validation uses `check_device_name` without loading torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEVICE_CHOICES",
    "available_devices",
    "check_device_name",
    "resolve_device",
    "training_dtype",
    "uses_bf16",
]

DEVICE_CHOICES = ("auto", "cpu", "cuda")
"""Accepted `trainer.device` values; ``cuda:N`` (a device index) is accepted too."""


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


def uses_bf16(bf16: bool | None, device: torch.device | str) -> bool:
    """Whether a model on ``device`` computes in bfloat16: `trainer.bf16` when set, else on CUDA only."""
    if bf16 is not None:
        return bf16
    return str(device).startswith("cuda")


def training_dtype(bf16: bool | None, device: torch.device | str) -> torch.dtype:
    """The dtype a single-process model loads and trains in on ``device`` (see `uses_bf16`)."""
    import torch

    return torch.bfloat16 if uses_bf16(bf16, device) else torch.float32


def available_devices() -> list[str]:
    """``["cpu"]``, plus ``"cuda"`` when a GPU is visible: the devices a device-parameterised test runs on."""
    import torch

    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
