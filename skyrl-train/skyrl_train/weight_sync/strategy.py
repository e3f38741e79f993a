"""Which weight-sync mode a run uses, from its config (upstream's rule for broadcast vs CUDA IPC)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyrl_train.weight_sync.sender import SyncMode

if TYPE_CHECKING:
    from skyrl_train.config.schema import SkyRLConfig

__all__ = ["transfer_mode", "override_existing_update_group"]


def transfer_mode(cfg: SkyRLConfig, engine_shares_policy: bool) -> SyncMode:
    """`shared` when the engine generates from the trainer's module (or a copy the trainer refreshes), `lora` when
    the policy trains a LoRA adapter, else CUDA IPC when `weight_sync_backend=nccl` and the engines run in this job
    colocated with the trainer (`trainer.placement.colocate_all`), else broadcast (remote engines always)."""
    if engine_shares_policy:
        return "shared"
    if cfg.trainer.policy.model.lora.rank > 0:
        return "lora"
    g = cfg.generator
    if g.weight_sync_backend == "nccl" and g.run_engines_locally and cfg.trainer.placement.colocate_all:
        return "cuda_ipc"
    return "broadcast"


def override_existing_update_group(cfg: SkyRLConfig) -> bool:
    """`generator.override_existing_update_group`: `auto` is `enable` for remote engines (a server may still be in
    the group of an earlier run) and `disable` for engines this run starts."""
    value = cfg.generator.override_existing_update_group
    if value == "auto":
        return not cfg.generator.run_engines_locally
    return value == "enable"
