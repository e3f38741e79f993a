"""`WeightSyncWorkerExtension`: mixed into every vLLM worker (``worker_extension_cls``) to receive new weights.

vLLM resolves this class by its qualified name inside its worker processes and adds its methods to the worker, so
`VLLMEngine.collective_rpc` can call them on every tensor-parallel rank:

- `init_weight_update_communicator`: join the weight-update group as rank ``rank_offset + worker rank`` (the trainer's
  sender is rank 0); gloo on CPU, NCCL on GPU;
- `receive_broadcast_weights`: receive each named tensor from rank 0, in the order given, and load it into the model
  (``model.load_weights`` takes checkpoint names and does vLLM's own fusing, e.g. q/k/v into qkv_proj);
- `receive_cuda_ipc_weights` (colocated GPU engines): open the trainer's CUDA IPC handle for this worker's GPU,
  unpack the packed buffer by the given sizes and load the tensors. GPU-only; never run in this repository's tests;
- `destroy_weights_update_group`.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

__all__ = ["WeightSyncWorkerExtension"]

logger = logging.getLogger(__name__)


def _dtype(name: str) -> torch.dtype:
    """``"bfloat16"`` or ``"torch.bfloat16"`` -> ``torch.bfloat16``."""
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown torch dtype {name!r}")
    return dtype


class WeightSyncWorkerExtension:
    """Methods added to vLLM's worker class (``self`` is the worker: ``rank``, ``device``, ``model_runner``)."""

    def init_weight_update_communicator(
        self, host: str, port: int, rank_offset: int, world_size: int, group_name: str, backend: str
    ) -> None:
        from skyrl_train.distributed.stateless_group import StatelessGroup

        if getattr(self, "_skyrl_weight_group", None) is not None:
            raise RuntimeError("this worker already joined a weight-update group; destroy it first")
        rank = rank_offset + self.rank
        self._skyrl_weight_group = StatelessGroup(host, port, rank, world_size, group_name, backend)
        logger.info("joined weight-update group %r as rank %d of %d (%s)", group_name, rank, world_size, backend)

    def receive_broadcast_weights(self, names: list[str], dtypes: list[str], shapes: list[list[int]]) -> None:
        group = getattr(self, "_skyrl_weight_group", None)
        if group is None:
            raise RuntimeError("init_weight_update_communicator must run before a broadcast weight update")
        model = self.model_runner.model
        for name, dtype, shape in zip(names, dtypes, shapes, strict=True):
            tensor = torch.empty(shape, dtype=_dtype(dtype), device=group.device)
            group.broadcast(tensor, src=0)
            model.load_weights(weights=[(name, tensor)])

    def receive_cuda_ipc_weights(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]], sizes: list[int], ipc_handles: dict
    ) -> None:
        """``ipc_handles`` maps a physical GPU id to ``(rebuild function, args)`` of the packed buffer on that GPU
        (from ``torch.multiprocessing.reductions.reduce_tensor``); ``sizes`` are the element counts in it."""
        device = torch.cuda.current_device()
        physical_id = str(torch.cuda.get_device_properties(device).uuid)
        rebuild, args = ipc_handles[physical_id]
        args = list(args)
        args[6] = device  # the device index, as seen from this process
        buffer = rebuild(*args)
        weights, offset = [], 0
        for name, dtype, shape, size in zip(names, dtypes, shapes, sizes, strict=True):
            weights.append((name, buffer[offset : offset + size].view(_dtype(dtype)).view(shape)))
            offset += size
        self.model_runner.model.load_weights(weights=weights)
        torch.cuda.synchronize()

    def destroy_weights_update_group(self) -> None:
        group = getattr(self, "_skyrl_weight_group", None)
        if group is not None:
            group.close()
        self._skyrl_weight_group = None

    def weight_update_group_rank(self) -> Any:
        """This worker's rank in the weight-update group, or None (for checks)."""
        group = getattr(self, "_skyrl_weight_group", None)
        return None if group is None else group.rank
