"""CUDA IPC on a real GPU: a buffer of mixed dtypes packed and shared in this process is opened by another process,
which gets every tensor back bit for bit (the offsets the issue found misaligned: a bf16 tensor of odd size followed
by int64 and fp32 ones). GPU only: skipped without CUDA (part of the GPU check, `scripts/gpu_check.sh`)."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

from skyrl_train.types.weight_sync_requests import TensorSpec
from skyrl_train.weight_sync.cuda_ipc import ModuleIpcSource, receive_cuda_ipc, share_buffer
from skyrl_train.weight_sync.packing import pack

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA IPC needs a GPU"),
    pytest.mark.timeout(300),
]


def _mixed_tensors() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        "odd_bf16": torch.randn(3, 5, generator=generator).to(torch.bfloat16),
        "int64": torch.randint(-(2**40), 2**40, (7,), generator=generator),
        "fp32": torch.randn(4, 3, generator=generator),
        "bool": torch.rand(9, generator=generator) > 0.5,
        "fp16_scalar": torch.tensor(1.5, dtype=torch.float16),
    }


def _receive(request, results) -> None:  # runs in the spawned process
    torch.cuda.set_device(0)
    received = {name: tensor.clone().cpu() for name, tensor in receive_cuda_ipc(request)}
    torch.cuda.synchronize()
    results.put(received)


def _open_in_another_process(request) -> dict[str, torch.Tensor]:
    context = mp.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=_receive, args=(request, results))
    process.start()
    try:
        return results.get(timeout=240)
    finally:
        process.join(timeout=60)


def test_another_process_opens_a_packed_buffer_of_mixed_dtypes_bit_for_bit():
    tensors = _mixed_tensors()
    specs = [TensorSpec.of(name, tensor) for name, tensor in tensors.items()]
    device = torch.device("cuda", 0)
    buffer, offsets = pack(((n, t.to(device)) for n, t in tensors.items()), specs, device)
    request = share_buffer(buffer, specs, offsets, weight_version=3)
    received = _open_in_another_process(request)
    assert list(received) == list(tensors)
    for name, tensor in tensors.items():
        assert received[name].dtype == tensor.dtype and torch.equal(received[name], tensor), name


def test_a_models_trainable_weights_reach_another_process_from_its_gpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Linear(3, 7)).to("cuda")
    model[1].to(torch.bfloat16)  # mixed dtypes: a bf16 layer after an fp32 one
    source = ModuleIpcSource(model)
    names = [spec.name for spec in source.weight_specs()]
    request = source.pack_cuda_ipc(names, weight_version=1)
    try:
        received = _open_in_another_process(request)
    finally:
        source.release_cuda_ipc()
    expected = {name: param.detach().cpu() for name, param in model.named_parameters()}
    assert list(received) == names == list(expected)
    for name in names:
        assert received[name].dtype == expected[name].dtype and torch.equal(received[name], expected[name]), name
