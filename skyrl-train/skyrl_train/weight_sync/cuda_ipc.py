"""CUDA IPC weight transfer (GPU only: engines colocated on the trainer's GPUs). Kept thin: the request format and
its JSON round trip are in `requests.py` and tested on CPU; these functions only map CUDA memory.

Sender: the chunk's tensors are packed, in request order, into one contiguous buffer on this GPU, and the buffer's
IPC handle is sent keyed by the GPU's UUID. Receiver: the engine worker opens the handle of its own GPU and cuts the
buffer into tensors by `sizes`, `dtypes` and `shapes`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from skyrl_train.weight_sync.requests import CudaIpcWeightUpdateRequest, torch_dtype

__all__ = ["receive_cuda_ipc", "send_cuda_ipc"]


def _gpu_uuid(device: torch.device) -> str:  # pragma: no cover - GPU only
    return str(torch.cuda.get_device_properties(device).uuid)


async def send_cuda_ipc(engines, state: dict[str, torch.Tensor], weight_version: int) -> None:  # pragma: no cover
    from torch.multiprocessing.reductions import reduce_tensor

    device = torch.device("cuda", torch.cuda.current_device())
    flat = [t.detach().to(device).contiguous().view(-1).view(torch.uint8) for t in state.values()]
    buffer = torch.cat(flat)
    request = CudaIpcWeightUpdateRequest.for_tensors(
        state,
        weight_version,
        sizes=[t.numel() for t in flat],
        ipc_handles={_gpu_uuid(device): reduce_tensor(buffer)},
    )
    await engines.update_named_weights(request)
    torch.cuda.synchronize(device)


def receive_cuda_ipc(request: CudaIpcWeightUpdateRequest) -> Iterator[tuple[str, torch.Tensor]]:  # pragma: no cover
    device = torch.device("cuda", torch.cuda.current_device())
    rebuild, args = request.ipc_handles[_gpu_uuid(device)]
    args = list(args)
    args[6] = device.index  # the handle names the sender's device ordinal; open it on ours
    buffer = rebuild(*args)
    offset = 0
    for name, dtype, shape, size in zip(request.names, request.dtypes, request.shapes, request.sizes, strict=True):
        yield name, buffer[offset : offset + size].view(torch_dtype(dtype)).view(shape)
        offset += size
