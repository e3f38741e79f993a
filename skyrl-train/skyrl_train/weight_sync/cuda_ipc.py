"""CUDA IPC weight transfer: engines colocated on the policy's GPUs read the policy's weights from GPU memory.

The design is upstream SkyRL's: each policy rank sends what its own GPU holds. For each chunk of the trainable
weights (at most `chunk_bytes` packed, `packing.chunk_specs`), `send_cuda_ipc` (the driver) has

1. every policy rank gather the full tensor of each weight of the chunk, one weight at a time (an FSDP2 ``DTensor``
   is all-gathered from the ranks: a collective, so all ranks pack the same names together), copy it into one
   buffer on the rank's own GPU at aligned offsets (`packing.pack`), and share that buffer: a request with one
   handle, keyed by the UUID of the rank's GPU (`ModuleIpcSource.pack_cuda_ipc`);
2. merges the ranks' requests into one that holds every rank's handle (`merge_requests`) and sends it to every
   engine; each engine worker opens the handle of its own GPU (`receive_cuda_ipc`; `handle_for_gpu` raises for an
   engine whose GPU has none, naming its UUID and the request's) and loads the tensors cut from it (`packing.unpack`);
3. has the ranks drop their buffers (`release_cuda_ipc`).

Why per rank, rather than the driver packing one buffer per engine GPU: with colocation every engine shares a GPU
with one policy rank, which already holds the weights there, so nothing crosses nodes or passes through the driver;
the driver holds only names, shapes and handles, and each GPU holds at most one packed chunk plus one gathered
weight beyond the training state. Engines on GPUs that no policy rank uses (not colocated, or other nodes) cannot be
reached this way and get the weights by broadcast (`strategy.transfer_mode`). A policy in the driver's own process
(`trainer.strategy=single`) packs on the GPU its weights are on, so only an engine on that same GPU finds a handle.

What runs on the CPU in the tests: the layout (`packing`), the packing of a module's full weights (also from FSDP2
shards on gloo ranks), merging, the handle lookup and the driver's chunk loop. GPU only, never run here (marked
``pragma: no cover``): `gpu_uuid`, `current_cuda_device`, `share_buffer`, `open_buffer`, `receive_cuda_ipc`,
`ModuleIpcSource.pack_cuda_ipc` / `release_cuda_ipc` / `_gpu`, and the vLLM workers' side. Unchecked for the same
reason: whether vLLM's layerwise reload keeps views of a chunk's tensors past that chunk (a layer split across
chunks), which would keep the rank's buffer allocated (torch keeps IPC-shared memory until the receiver lets go)
beyond the one-chunk bound.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from torch import nn

from skyrl_train.types.weight_sync_requests import CudaIpcWeightUpdateRequest, TensorSpec
from skyrl_train.weight_sync.packing import chunk_specs, pack, unpack

if TYPE_CHECKING:
    from skyrl_train.weight_sync.sender import WeightSyncEngines

__all__ = [
    "CudaIpcSource",
    "ModuleIpcSource",
    "handle_for_gpu",
    "merge_requests",
    "receive_cuda_ipc",
    "send_cuda_ipc",
]

_STORAGE_DEVICE_ARG = 6
"""Position of the device ordinal in the arguments of ``torch.multiprocessing.reductions.rebuild_cuda_tensor``."""


@runtime_checkable
class CudaIpcSource(Protocol):
    """The policy as the CUDA IPC sender sees it: every process that holds its weights on a GPU packs a chunk there
    (fsdp2's `PolicyWorkerGroup`, over its ranks; `ModuleIpcSource`, in one process)."""

    def weight_specs(self) -> list[TensorSpec]:
        """The trainable weights, in the order they are sent."""
        ...

    def pack_cuda_ipc(self, names: list[str], weight_version: int) -> CudaIpcWeightUpdateRequest:
        """Pack the named weights and share the buffer(s): the request, with one handle per GPU."""
        ...

    def release_cuda_ipc(self) -> None:
        """Drop the buffer(s) of the last `pack_cuda_ipc` (the engines have loaded them)."""
        ...


async def send_cuda_ipc(
    engines: WeightSyncEngines, source: CudaIpcSource, weight_version: int, chunk_bytes: int
) -> None:
    """Send the policy's trainable weights to every engine, chunk by chunk (see the module docstring)."""
    specs = await asyncio.to_thread(source.weight_specs)
    if not specs:
        raise RuntimeError("the policy returned no trainable weights to sync")
    for chunk in chunk_specs(specs, chunk_bytes):
        try:  # released even when some rank failed to pack: the others hold buffers
            request = await asyncio.to_thread(source.pack_cuda_ipc, [spec.name for spec in chunk], weight_version)
            await engines.update_named_weights(request)
        finally:
            await asyncio.to_thread(source.release_cuda_ipc)
    await engines.reset_prefix_cache()


def merge_requests(requests: Sequence[CudaIpcWeightUpdateRequest]) -> CudaIpcWeightUpdateRequest:
    """One request with the handles of every rank's request (each rank packed the same chunk on its own GPU).

    Raises:
        ValueError: no request, ranks that packed different chunks, or two ranks on one GPU.
    """
    if not requests:
        raise ValueError("no rank packed a CUDA IPC chunk")
    layout = dataclasses.replace(requests[0], ipc_handles={})
    handles: dict[str, Any] = {}
    rank_of_gpu: dict[str, int] = {}
    for rank, request in enumerate(requests):
        if dataclasses.replace(request, ipc_handles={}) != layout:
            raise ValueError(f"policy rank {rank} packed a different CUDA IPC chunk from rank 0's")
        for gpu, handle in request.ipc_handles.items():
            if gpu in rank_of_gpu:
                raise ValueError(
                    f"policy ranks {rank_of_gpu[gpu]} and {rank} both packed on GPU {gpu}: CUDA IPC weight sync "
                    "needs one policy rank per GPU"
                )
            handles[gpu] = handle
            rank_of_gpu[gpu] = rank
    return dataclasses.replace(layout, ipc_handles=handles)


def handle_for_gpu(request: CudaIpcWeightUpdateRequest, gpu: str) -> Any:
    """The handle of the buffer on GPU `gpu` (a UUID).

    Raises:
        RuntimeError: the request has none for it (the engine is on a GPU no policy rank packed on).
    """
    handle = request.ipc_handles.get(gpu)
    if handle is None:
        raise RuntimeError(
            f"this engine's GPU {gpu} has no CUDA IPC handle in the weight update, which has handles for GPUs "
            f"{sorted(request.ipc_handles)}: CUDA IPC reaches only engines on the policy ranks' GPUs "
            "(trainer.placement.colocate_all=true); engines on other GPUs get the weights by broadcast "
            "(trainer.placement.colocate_all=false)"
        )
    return handle


class ModuleIpcSource:
    """`CudaIpcSource` over a model in this process: its trainable parameters, full, packed on this process's GPU.

    On an FSDP2 rank (`PolicyActor`) each ``DTensor`` parameter is all-gathered from the ranks when it is packed,
    so every rank must pack the same names at the same time; in the driver (``trainer.strategy=single``) the
    parameters are plain tensors. The buffer lives until `release_cuda_ipc`.
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self._buffer: torch.Tensor | None = None

    def _trainable(self) -> dict[str, nn.Parameter]:
        return {name: param for name, param in self.model.named_parameters() if param.requires_grad}

    def weight_specs(self) -> list[TensorSpec]:
        return [TensorSpec.of(name, param) for name, param in self._trainable().items()]

    def pack_full_weights(
        self, names: list[str], device: torch.device | str
    ) -> tuple[torch.Tensor, list[TensorSpec], list[int]]:
        """The named weights, full, packed into one buffer on `device` (gathered one at a time): the buffer, the
        specs and the offsets.

        Raises:
            KeyError: a name that is not a trainable parameter of the model.
        """
        params = self._trainable()
        unknown = [name for name in names if name not in params]
        if unknown:
            raise KeyError(f"the policy has no trainable parameter(s) {unknown}")
        specs = [TensorSpec.of(name, params[name]) for name in names]
        buffer, offsets = pack(_full_tensors(params, names), specs, device)
        return buffer, specs, offsets

    def pack_cuda_ipc(self, names: list[str], weight_version: int) -> CudaIpcWeightUpdateRequest:  # pragma: no cover
        if self._buffer is not None:
            raise RuntimeError("the last CUDA IPC chunk was not released before the next was packed")
        buffer, specs, offsets = self.pack_full_weights(names, self._gpu())
        request = share_buffer(buffer, specs, offsets, weight_version)
        self._buffer = buffer
        return request

    def release_cuda_ipc(self) -> None:  # pragma: no cover - GPU only
        self._buffer = None
        torch.cuda.ipc_collect()  # free sent blocks the engines have let go of

    def _gpu(self) -> torch.device:  # pragma: no cover - GPU only
        """The GPU the weights are on (the calling thread's current device may be another: it is per thread)."""
        device = next(iter(self._trainable().values())).device
        return device if device.type == "cuda" else current_cuda_device()


def _full_tensors(params: dict[str, nn.Parameter], names: list[str]) -> Iterator[tuple[str, torch.Tensor]]:
    """Each named parameter's full tensor, made when asked for (a ``DTensor`` shard is all-gathered)."""
    from torch.distributed.tensor import DTensor

    for name in names:
        param = params[name]
        with torch.no_grad():
            tensor = param.full_tensor() if isinstance(param, DTensor) else param.detach()
        yield name, tensor


# -- GPU only ------------------------------------------------------------------------------------------------------


def current_cuda_device() -> torch.device:  # pragma: no cover - GPU only
    if not torch.cuda.is_available():
        raise RuntimeError("CUDA IPC weight sync packs and opens buffers on a GPU, and torch sees none here")
    return torch.device("cuda", torch.cuda.current_device())


def gpu_uuid(device: torch.device) -> str:  # pragma: no cover - GPU only
    """The physical GPU's UUID: the same in every process, whatever ``CUDA_VISIBLE_DEVICES`` numbers it."""
    return str(torch.cuda.get_device_properties(device).uuid)


def share_buffer(
    buffer: torch.Tensor, specs: list[TensorSpec], offsets: list[int], weight_version: int
) -> CudaIpcWeightUpdateRequest:  # pragma: no cover - GPU only
    """The request for a packed `buffer`, with its IPC handle keyed by its GPU's UUID."""
    from torch.multiprocessing.reductions import reduce_tensor

    torch.cuda.synchronize(buffer.device)  # the copies into the buffer are done before another process reads it
    return CudaIpcWeightUpdateRequest.for_specs(
        specs, weight_version, offsets=offsets, ipc_handles={gpu_uuid(buffer.device): reduce_tensor(buffer)}
    )


def open_buffer(handle: Any, device: torch.device) -> torch.Tensor:  # pragma: no cover - GPU only
    rebuild, args = handle
    args = list(args)
    args[_STORAGE_DEVICE_ARG] = device.index  # the handle names the sender's device ordinal; open it on ours
    return rebuild(*args)


def receive_cuda_ipc(
    request: CudaIpcWeightUpdateRequest,
) -> Iterator[tuple[str, torch.Tensor]]:  # pragma: no cover - GPU only
    """The request's tensors, as views of the buffer on this process's GPU (copy them before the sender releases
    it, and synchronize)."""
    device = current_cuda_device()
    return unpack(open_buffer(handle_for_gpu(request, gpu_uuid(device)), device), request)
