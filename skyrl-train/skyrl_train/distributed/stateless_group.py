"""A torch process group between processes that already have (or must not touch) a default process group.

The weight-update group joins the trainer's sender (rank 0) with every inference worker: vLLM's workers have their
own default group, so this one is built directly on a ``TCPStore`` (hosted by rank 0) as a ``ProcessGroupGloo``
(CPU tensors) or ``ProcessGroupNCCL`` (CUDA tensors), without ``init_process_group`` and without a global registry.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["StatelessGroup"]


class StatelessGroup:
    """Rank `rank` of a `world_size`-rank group named `group_name`, rendezvousing at `host:port` (rank 0 hosts).

    Args:
        backend: "gloo" (tensors on CPU) or "nccl" (tensors on the current CUDA device).
        timeout_s: how long to wait for the other ranks, at rendezvous and in each collective.
    """

    def __init__(
        self,
        host: str,
        port: int,
        rank: int,
        world_size: int,
        group_name: str,
        backend: str,
        timeout_s: float = 600.0,
    ):
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
        timeout = timedelta(seconds=timeout_s)
        self.rank, self.world_size, self.backend = rank, world_size, backend
        self._store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout)
        store = dist.PrefixStore(group_name, self._store)
        if backend == "gloo":
            self._group = dist.ProcessGroupGloo(store, rank, world_size, timeout)
        else:
            self._group = dist.ProcessGroupNCCL(store, rank, world_size)

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        """Broadcast `tensor` (in place on receivers) from rank `src`; it must be on `device`."""
        self._group.broadcast([tensor], dist.BroadcastOptions(rootRank=src, rootTensor=0)).wait()

    def close(self) -> None:
        self._group = None
        self._store = None
