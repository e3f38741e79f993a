"""Tensors of mixed dtypes packed into one byte buffer and cut out of it again: the layout of a CUDA IPC chunk.

Plain torch on any device: the sender packs on its GPU and the receiver unpacks the buffer it mapped from the
sender, but these functions are the same on the CPU, where the tests check them.

Layout: the tensors in request order, each starting at a multiple of `ALIGNMENT` bytes, so that each tensor's bytes
can be viewed as its dtype (``Tensor.view(dtype)`` needs a byte offset that is a multiple of the element size; a
bf16 tensor of odd size followed by an int64 one breaks that without padding). `aligned_offsets` is the one
definition; the request carries its offsets (`CudaIpcWeightUpdateRequest.offsets`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import torch

from skyrl_train.types.weight_sync_requests import CudaIpcWeightUpdateRequest, TensorSpec, torch_dtype

__all__ = ["ALIGNMENT", "aligned_offsets", "chunk_specs", "pack", "split_by_bytes", "unpack"]

ALIGNMENT = 256
"""Byte alignment of every tensor in a packed buffer: the granularity of CUDA allocations, a multiple of the element
size of every dtype."""

T = TypeVar("T")


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def aligned_offsets(specs: Sequence[TensorSpec]) -> tuple[list[int], int]:
    """Each tensor's byte offset in the packed buffer (a multiple of `ALIGNMENT`, in order), and the buffer's size."""
    offsets: list[int] = []
    end = 0
    for spec in specs:
        offsets.append(_aligned(end))
        end = offsets[-1] + spec.nbytes
    return offsets, end


def pack(
    tensors: Iterable[tuple[str, torch.Tensor]], specs: Sequence[TensorSpec], device: torch.device | str
) -> tuple[torch.Tensor, list[int]]:
    """A uint8 buffer on `device` holding the bytes of `tensors` at `aligned_offsets(specs)`, and those offsets.

    `tensors` come in the order of `specs` and must match them (name, dtype, shape). They may come from a generator:
    each is copied in before the next is asked for, so the peak memory is the buffer plus one tensor.

    Raises:
        ValueError: a tensor that differs from its spec, or fewer or more tensors than specs.
    """
    offsets, size = aligned_offsets(specs)
    buffer = torch.empty(size, dtype=torch.uint8, device=device)
    for (name, tensor), spec, offset in zip(tensors, specs, offsets, strict=True):
        if TensorSpec.of(name, tensor) != spec:
            raise ValueError(f"packing {TensorSpec.of(name, tensor)} where the layout expects {spec}")
        buffer[offset : offset + spec.nbytes].copy_(tensor.detach().contiguous().reshape(-1).view(torch.uint8))
    return buffer, offsets


def unpack(buffer: torch.Tensor, request: CudaIpcWeightUpdateRequest) -> Iterator[tuple[str, torch.Tensor]]:
    """The request's tensors as views of `buffer` (1-D uint8, as `pack` made it), in request order; no copy.

    Raises:
        ValueError: a tensor whose bytes lie outside the buffer (sender and receiver disagree on the chunk).
    """
    for spec, offset in zip(request.specs(), request.offsets, strict=True):
        end = offset + spec.nbytes
        if end > buffer.numel():
            raise ValueError(f"{spec.name}: bytes {offset}..{end} lie outside the packed buffer of {buffer.numel()}")
        yield spec.name, buffer[offset:end].view(torch_dtype(spec.dtype)).view(spec.shape)


def split_by_bytes(items: Iterable[T], nbytes: Callable[[T], int], limit: int) -> Iterator[list[T]]:
    """`items` in order, cut into runs whose `nbytes` add up to at most `limit` (a larger item is a run of its own)."""
    run: list[T] = []
    size = 0
    for item in items:
        item_bytes = nbytes(item)
        if run and size + item_bytes > limit:
            yield run
            run, size = [], 0
        run.append(item)
        size += item_bytes
    if run:
        yield run


def chunk_specs(specs: Iterable[TensorSpec], chunk_bytes: int) -> Iterator[list[TensorSpec]]:
    """`specs` cut into chunks whose packed buffer (padding included) is at most `chunk_bytes` (a larger tensor is a
    chunk of its own)."""
    return split_by_bytes(specs, lambda spec: _aligned(spec.nbytes), chunk_bytes)
