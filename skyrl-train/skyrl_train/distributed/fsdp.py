"""FSDP2 (``torch.distributed.fsdp.fully_shard``) for the training workers, and the collectives they use.

``shard_model`` applies ``fully_shard`` to every transformer block (the classes a transformers model lists in
``_no_split_modules``) and then to the root, with ``trainer.{role}.fsdp_config``:

- ``fsdp_size``: -1 (or the world size) shards every parameter over all ranks; a divisor ``k`` of the world size
  shards over groups of ``k`` ranks and replicates across groups (HSDP, a 2-D mesh ``[world / k, k]``);
- ``reshard_after_forward``: free the gathered parameters after each block's forward (re-gathered for backward);
- ``cpu_offload`` is not offered: it only applies to GPU ranks, nothing here runs on a GPU to verify it, and the
  config refuses it (``skyrl_train.config.support``);
- mixed precision (GPU with ``trainer.bf16`` true or unset): compute in bf16, keep fp32 parameters and reduce gradients in fp32.
  CPU ranks in bf16 keep fp32 parameters too and compute under the workers' bf16 autocast, as the single strategy
  does (`skyrl_train.utils.device.precision`).

FSDP *averages* gradients over the ranks of the mesh (gloo has no pre-scaled sum, so the divide factor stays at its
default). Each rank's loss is divided by the normaliser of the whole global mini-batch (see
``skyrl_train.algorithms.reductions``), so the workers back-propagate ``loss x world_size``:
the average of those is exactly the single-process gradient.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from skyrl_train.utils.device import uses_bf16

__all__ = ["all_gather_objects", "build_device_mesh", "shard_model", "FSDPSetup"]


class FSDPSetup:
    """What ``shard_model`` needs besides the model: the role's ``fsdp_config``, device and precision."""

    def __init__(self, fsdp_config: Any, device: str, bf16: bool | None, role: str):
        self.reshard_after_forward = bool(getattr(fsdp_config, "reshard_after_forward", True))
        self.fsdp_size = int(getattr(fsdp_config, "fsdp_size", -1))
        self.device = device
        self.mixed_precision = device == "cuda" and uses_bf16(bf16, device)
        """bf16 compute over fp32 masters (GPU only; `trainer.bf16` true or unset)."""
        self.role = role


def build_device_mesh(fsdp_size: int, device: str, role: str):
    """A 1-D mesh over all ranks (full sharding) or a 2-D ``[replicate, shard]`` mesh for ``fsdp_size`` > 0."""
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    device_type = "cuda" if device == "cuda" else "cpu"
    if fsdp_size in (-1, world):
        return init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))
    if fsdp_size < 1 or world % fsdp_size:
        raise ValueError(
            f"trainer.{role}.fsdp_config.fsdp_size={fsdp_size} must be -1 or a positive divisor of the {role} world "
            f"size ({world})"
        )
    return init_device_mesh(device_type, (world // fsdp_size, fsdp_size), mesh_dim_names=("replicate", "shard"))


def _block_classes(model: nn.Module) -> set[str]:
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return names


def shard_model(model: nn.Module, setup: FSDPSetup, forward_methods: tuple[str, ...] = ()) -> nn.Module:
    """Shard ``model`` in place: every transformer block, then the root (embeddings, final norm, LM head).

    FSDP gathers the root's parameters around ``forward`` only; ``forward_methods`` names other entry points that
    need the same (e.g. the critic's ``values``).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    mesh = build_device_mesh(setup.fsdp_size, setup.device, setup.role)
    options: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": setup.reshard_after_forward}
    if setup.mixed_precision:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    blocks = _block_classes(model)
    if not blocks:
        raise ValueError(f"{type(model).__name__} declares no transformer blocks (_no_split_modules) to shard")
    for module in list(model.modules()):
        if type(module).__name__ in blocks:
            fully_shard(module, **options)
    fully_shard(model, **options)
    for method in forward_methods:
        register_fsdp_forward_method(model, method)
    return model


def all_gather_objects(obj: Any) -> list[Any]:
    """``obj`` of every rank, in rank order (picklable objects; tensors are moved to CPU first)."""
    if isinstance(obj, torch.Tensor):
        obj = obj.detach().cpu()
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered
