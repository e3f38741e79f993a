"""Which weight-sync mode a run uses, from its config (upstream's rule for broadcast vs CUDA IPC)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyrl_train.config.support import syncs_by_cuda_ipc
from skyrl_train.weight_sync.sender import SyncMode

if TYPE_CHECKING:
    from skyrl_train.config.schema import SkyRLConfig

__all__ = ["override_existing_update_group", "trainer_address", "transfer_mode"]


def transfer_mode(cfg: SkyRLConfig, engine_shares_policy: bool) -> SyncMode:
    """`shared` when the engine generates from the trainer's module (or a copy the trainer refreshes), `lora` when
    the policy trains a LoRA adapter, else CUDA IPC when `weight_sync_backend=nccl` and the engines run in this job
    colocated with the trainer (`config.support.syncs_by_cuda_ipc`), else broadcast (remote engines always)."""
    if engine_shares_policy:
        return "shared"
    if cfg.trainer.policy.model.lora.rank > 0:
        return "lora"
    return "cuda_ipc" if syncs_by_cuda_ipc(cfg) else "broadcast"


def override_existing_update_group(cfg: SkyRLConfig) -> bool:
    """`generator.override_existing_update_group`: `auto` is `enable` for remote engines (a server may still be in
    the group of an earlier run) and `disable` for engines this run starts."""
    value = cfg.generator.override_existing_update_group
    if value == "auto":
        return not cfg.generator.run_engines_locally
    return value == "enable"


def trainer_address(remote_urls: list[str]) -> str:
    """The address remote servers reach this process at (the weight-update group's TCP store): the local address
    of the route to the first server (no packet is sent), so a server on this machine gets 127.0.0.1."""
    import socket
    from urllib.parse import urlsplit

    address = remote_urls[0] if "://" in remote_urls[0] else f"http://{remote_urls[0]}"
    parts = urlsplit(address)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((parts.hostname, parts.port or 80))
        return probe.getsockname()[0]
