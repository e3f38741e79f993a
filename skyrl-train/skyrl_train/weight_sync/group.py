"""`WeightGroup`: a `torch.distributed` process group of the trainer and the engine workers, for weight broadcasts.

It is built from its own TCP store (hosted by rank 0, the trainer) and never touches the default process group, so
a process that already has one (an FSDP rank, a vLLM worker with its tensor-parallel group) can join as well.
Backends: `gloo` (CPU tensors; what the CPU tests use) and `nccl` (CUDA tensors: GPU only, never run here); see
`group_device`.
"""

from __future__ import annotations

import datetime
import logging

import torch
import torch.distributed as dist

from skyrl_train.types.weight_sync_init_info import WeightSyncInitInfo

__all__ = ["WeightGroup", "group_device"]

logger = logging.getLogger(__name__)


def group_device(backend: str) -> torch.device:
    """Where a member's broadcast tensors live: this process's current CUDA device with nccl (NCCL moves only CUDA
    tensors), the CPU with gloo. The trainer moves each tensor there before broadcasting it; engines receive into
    tensors allocated there.

    Raises:
        RuntimeError: nccl in a process where torch sees no GPU.
        ValueError: another backend.
    """
    if backend == "gloo":
        return torch.device("cpu")
    if backend != "nccl":
        raise ValueError(f"weight sync backend must be 'gloo' or 'nccl', got {backend!r}")
    if not torch.cuda.is_available():
        raise RuntimeError(
            "a nccl weight-update group sends CUDA tensors, and torch sees no GPU in this process; use "
            "generator.weight_sync_backend=gloo"
        )
    return torch.device("cuda", torch.cuda.current_device())


class WeightGroup:
    """This process's membership of the weight-update group described by `info`, as `rank`.

    Joining blocks until every member has joined (or `info.timeout_s` passes). Rank 0 (the trainer) hosts the TCP
    store at `info.master_addr:info.master_port`; it opens it first with `host_store` (which picks a free port), so
    that it can tell the engines the port before it joins.
    """

    def __init__(self, info: WeightSyncInitInfo, rank: int, store: dist.TCPStore | None = None):
        if not 0 <= rank < info.world_size:
            raise ValueError(f"rank {rank} is outside the weight-update group of {info.world_size}")
        self.info = info
        self.rank = rank
        self.device = group_device(info.backend)
        timeout = datetime.timedelta(seconds=info.timeout_s)
        if store is None:
            if rank == 0:
                raise ValueError("rank 0 joins with the store it opened with WeightGroup.host_store")
            store = dist.TCPStore(info.master_addr, info.master_port, info.world_size, is_master=False, timeout=timeout)
        self._store = store
        store = dist.PrefixStore(info.group_name, self._store)
        if info.backend == "nccl":  # GPU only
            self._group = dist.ProcessGroupNCCL(store, rank, info.world_size)
        else:
            self._group = dist.ProcessGroupGloo(store, rank, info.world_size, timeout)
        # Every member reaches this point only once all have joined, so a wrong world size fails here, not later.
        self.barrier()
        logger.info(
            "joined weight-update group %r as rank %d of %d (%s)", info.group_name, rank, info.world_size, info.backend
        )

    @staticmethod
    def host_store(master_addr: str, world_size: int, timeout_s: float) -> dist.TCPStore:
        """Rank 0's TCP store on a free port of `master_addr` (`.port`), open before anyone joins."""
        timeout = datetime.timedelta(seconds=timeout_s)
        return dist.TCPStore(master_addr, 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        """Broadcast `tensor` from rank 0 into every member's `tensor` (in place; same shape and dtype everywhere)."""
        options = dist.BroadcastOptions()
        options.rootRank = 0
        self._group.broadcast([tensor], options).wait()
        return tensor

    def barrier(self) -> None:
        flag = torch.zeros(1, device=self.device)
        self._group.allreduce([flag]).wait()

    def destroy(self) -> None:
        """Leave the group (its other members should leave too); the object is unusable afterwards."""
        self._group = None
        self._store = None
