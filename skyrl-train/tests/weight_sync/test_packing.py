"""The CUDA IPC buffer layout on CPU: mixed dtypes packed at aligned offsets and cut out bit-exact by the receiver's
own code (`packing.unpack`, what `cuda_ipc.receive_cuda_ipc` applies to the buffer it maps), and chunking."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.weight_sync import CudaIpcWeightUpdateRequest, TensorSpec, WeightUpdateRequest
from skyrl_train.weight_sync.packing import aligned_offsets, chunk_specs, pack, unpack


def mixed_tensors() -> dict[str, torch.Tensor]:
    """bf16 of odd size first (35 bytes), then the dtypes that broke unaligned offsets."""
    g = torch.Generator().manual_seed(0)
    return {
        "norm.weight": torch.randn(5, 7, generator=g).to(torch.bfloat16),  # 35 elements, 70 bytes
        "proj.weight": torch.randn(3, 3, generator=g),  # fp32
        "steps": torch.tensor([3, -1, 2**40], dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "codes": torch.tensor([0, 255, 7], dtype=torch.uint8),
        "scale": torch.tensor(0.5, dtype=torch.float16),  # 0-dim
    }


def specs_of(tensors: dict[str, torch.Tensor]) -> list[TensorSpec]:
    return [TensorSpec.of(name, t) for name, t in tensors.items()]


def as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1).view(torch.uint8)


def test_every_tensor_starts_at_a_multiple_of_256_bytes():
    offsets, size = aligned_offsets(specs_of(mixed_tensors()))
    assert offsets == [0, 256, 512, 768, 1024, 1280]
    assert size == 1282  # the last tensor is 2 bytes; no padding after it


def test_mixed_dtypes_unpack_bit_exact_with_the_receivers_code():
    tensors = mixed_tensors()
    specs = specs_of(tensors)
    buffer, offsets = pack(tensors.items(), specs, "cpu")
    request = CudaIpcWeightUpdateRequest.for_specs(specs, 4, offsets=offsets, ipc_handles={"GPU-0": buffer})
    received = WeightUpdateRequest.from_rpc(request.to_rpc())  # as it crosses Ray (never HTTP)

    unpacked = dict(unpack(received.ipc_handles["GPU-0"], received))

    assert list(unpacked) == list(tensors)
    for name, tensor in tensors.items():
        assert unpacked[name].dtype == tensor.dtype, name
        assert unpacked[name].shape == tensor.shape, name
        assert torch.equal(as_bytes(unpacked[name]), as_bytes(tensor)), name


def test_packing_takes_tensors_one_at_a_time_from_a_generator():
    tensors = mixed_tensors()
    made = []

    def one_by_one():
        for name, tensor in tensors.items():
            made.append(name)
            yield name, tensor

    buffer, offsets = pack(one_by_one(), specs_of(tensors), "cpu")
    assert made == list(tensors)
    assert torch.equal(buffer[256 : 256 + 36].view(torch.float32).view(3, 3), tensors["proj.weight"])


def test_a_tensor_that_differs_from_its_spec_is_refused_naming_both():
    tensors = mixed_tensors()
    specs = specs_of(tensors)
    tensors["proj.weight"] = tensors["proj.weight"].double()
    with pytest.raises(ValueError, match=r"dtype='float64'.*where the layout expects.*proj\.weight.*float32"):
        pack(tensors.items(), specs, "cpu")


def test_a_request_whose_tensors_lie_beyond_the_buffer_is_refused():
    tensors = mixed_tensors()
    specs = specs_of(tensors)
    buffer, offsets = pack(tensors.items(), specs, "cpu")
    request = CudaIpcWeightUpdateRequest.for_specs(specs, 0, offsets=offsets)
    with pytest.raises(ValueError, match=r"scale: bytes 1280\.\.1282 lie outside the packed buffer of 1280"):
        list(unpack(buffer[:1280], request))


def test_chunks_hold_at_most_the_byte_budget_padding_included():
    specs = [TensorSpec(f"w{i}", "bfloat16", (101,)) for i in range(5)]  # 202 bytes, 256 padded
    chunks = list(chunk_specs(specs, 512))
    assert [[s.name for s in chunk] for chunk in chunks] == [["w0", "w1"], ["w2", "w3"], ["w4"]]
    assert all(aligned_offsets(chunk)[1] <= 512 for chunk in chunks)


def test_a_tensor_larger_than_the_budget_is_a_chunk_of_its_own():
    specs = [
        TensorSpec("small", "float32", (4,)),
        TensorSpec("big", "float32", (1000,)),
        TensorSpec("s2", "int8", (1,)),
    ]
    assert [[s.name for s in chunk] for chunk in chunk_specs(specs, 1024)] == [["small"], ["big"], ["s2"]]
