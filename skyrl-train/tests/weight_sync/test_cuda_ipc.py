"""CUDA IPC weight sync logic on CPU: every policy rank packs on its own GPU, the driver merges the ranks' handles, each
engine opens the handle of its own GPU.

Only the IPC share/open is replaced: a "GPU" is a UUID string and its "handle" is the packed CPU buffer itself
(`FakeRanks`, `FakeGpuEngine`); packing (`ModuleIpcSource.pack_full_weights`), merging, the handle lookup, the
unpacking and the driver's chunk loop (`WeightSyncSender` in `cuda_ipc` mode) are the real code.
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from skyrl_train.weight_sync import CudaIpcWeightUpdateRequest, WeightSyncSender, WeightUpdateRequest, copy_into_module
from skyrl_train.weight_sync.cuda_ipc import ModuleIpcSource, handle_for_gpu, merge_requests
from skyrl_train.weight_sync.packing import unpack

from .conftest import policy_worker


class MixedModel(nn.Module):
    """Trainable weights of two dtypes (bf16 of odd size first), plus a frozen one that is never sent."""

    def __init__(self, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.norm = nn.Parameter(torch.randn(5, 7, generator=g).to(torch.bfloat16))
        self.proj = nn.Linear(3, 4)
        self.frozen = nn.Parameter(torch.randn(2, generator=g), requires_grad=False)
        with torch.no_grad():
            self.proj.weight.copy_(torch.randn(4, 3, generator=g))
            self.proj.bias.copy_(torch.randn(4, generator=g))


class FakeRanks:
    """A `CudaIpcSource` of policy ranks on GPUs `gpus`, each packing `model` (a rank's full weights) for real."""

    def __init__(self, model: nn.Module, gpus: list[str]):
        self.packers = {gpu: ModuleIpcSource(model) for gpu in gpus}
        self.packed: list[list[str]] = []
        self.held = 0  # chunks packed and not released yet

    def weight_specs(self):
        return next(iter(self.packers.values())).weight_specs()

    def pack_cuda_ipc(self, names, weight_version):
        self.packed.append(names)
        self.held += 1
        requests = []
        for gpu, packer in self.packers.items():
            buffer, specs, offsets = packer.pack_full_weights(names, "cpu")
            requests.append(
                CudaIpcWeightUpdateRequest.for_specs(specs, weight_version, offsets=offsets, ipc_handles={gpu: buffer})
            )
        return merge_requests(requests)

    def release_cuda_ipc(self):
        self.held = 0


class FakeGpuEngine:
    """An engine worker on GPU `gpu`: opens its GPU's handle and loads the tensors into its own model."""

    def __init__(self, gpu: str, model: nn.Module):
        self.gpu = gpu
        self.model = model
        self.requests: list[CudaIpcWeightUpdateRequest] = []
        self.weight_version = 0
        self.prefix_cache_resets = 0

    async def update_named_weights(self, request: WeightUpdateRequest) -> None:
        request = WeightUpdateRequest.from_rpc(request.to_rpc())  # as it crosses Ray
        self.requests.append(request)
        copy_into_module(self.model, unpack(handle_for_gpu(request, self.gpu), request))
        self.weight_version = request.weight_version

    async def reset_prefix_cache(self) -> None:
        self.prefix_cache_resets += 1


class FakeEngines:
    """What `InferenceEngineClient` does with a weight update: every engine applies it."""

    def __init__(self, engines: list[FakeGpuEngine]):
        self.engines = engines

    async def update_named_weights(self, request: WeightUpdateRequest) -> None:
        for engine in self.engines:
            await engine.update_named_weights(request)

    async def reset_prefix_cache(self) -> None:
        for engine in self.engines:
            await engine.reset_prefix_cache()


def ipc_sender(engines, source, chunk_bytes: int = 256 * 2**20) -> WeightSyncSender:
    return WeightSyncSender(FakeEngines(engines), source, "cuda_ipc", chunk_bytes=chunk_bytes)


async def test_every_engine_loads_the_policy_weights_from_the_buffer_on_its_own_gpu():
    policy = MixedModel(seed=1)
    engines = [FakeGpuEngine("GPU-a", MixedModel(seed=2)), FakeGpuEngine("GPU-b", MixedModel(seed=3))]
    source = FakeRanks(policy, ["GPU-a", "GPU-b"])

    await ipc_sender(engines, source).sync(weight_version=5)

    for engine in engines:
        assert engine.weight_version == 5
        assert sorted(engine.requests[0].ipc_handles) == ["GPU-a", "GPU-b"]
        for name in ("norm", "proj.weight", "proj.bias"):
            assert torch.equal(engine.model.get_parameter(name), policy.get_parameter(name)), name
        assert not torch.equal(engine.model.frozen, policy.frozen)  # frozen weights are not sent
        assert engine.prefix_cache_resets == 1


async def test_the_weights_go_in_chunks_of_at_most_chunk_bytes_each_released_after_the_engines_load_it():
    source = FakeRanks(MixedModel(seed=1), ["GPU-a"])
    engine = FakeGpuEngine("GPU-a", MixedModel(seed=2))
    released_before_next = []
    pack = source.pack_cuda_ipc

    def pack_after_release(names, weight_version):
        released_before_next.append(source.held == 0)
        return pack(names, weight_version)

    source.pack_cuda_ipc = pack_after_release

    await ipc_sender([engine], source, chunk_bytes=256).sync(weight_version=1)  # each weight is <= 256 bytes

    assert source.packed == [["norm"], ["proj.weight"], ["proj.bias"]]
    assert [r.names for r in engine.requests] == source.packed
    assert released_before_next == [True, True, True]
    assert source.held == 0


async def test_an_engine_on_a_gpu_without_a_handle_names_its_gpu_and_the_requests_and_the_chunk_is_released():
    source = FakeRanks(MixedModel(seed=1), ["GPU-a", "GPU-b"])
    engines = [FakeGpuEngine("GPU-a", MixedModel(seed=2)), FakeGpuEngine("GPU-z", MixedModel(seed=3))]

    with pytest.raises(RuntimeError, match=r"GPU GPU-z has no CUDA IPC handle .* GPUs \['GPU-a', 'GPU-b'\]"):
        await ipc_sender(engines, source).sync(weight_version=1)
    assert source.held == 0


def test_ranks_that_packed_on_one_gpu_are_refused():
    model = MixedModel(seed=1)
    requests = [FakeRanks(model, ["GPU-a"]).pack_cuda_ipc(["norm"], 0) for _ in range(2)]
    with pytest.raises(ValueError, match="policy ranks 0 and 1 both packed on GPU GPU-a"):
        merge_requests(requests)


def test_ranks_that_packed_different_chunks_are_refused():
    model = MixedModel(seed=1)
    first = FakeRanks(model, ["GPU-a"]).pack_cuda_ipc(["norm"], 0)
    second = FakeRanks(model, ["GPU-b"]).pack_cuda_ipc(["proj.bias"], 0)
    with pytest.raises(ValueError, match="policy rank 1 packed a different CUDA IPC chunk from rank 0's"):
        merge_requests([first, second])


def test_packing_a_name_the_policy_does_not_train_is_refused():
    with pytest.raises(KeyError, match=r"no trainable parameter\(s\) \['frozen'\]"):
        ModuleIpcSource(MixedModel(seed=1)).pack_full_weights(["norm", "frozen"], "cpu")


def test_a_policy_in_this_process_is_packed_from_its_own_module(tiny_model):
    policy = policy_worker(tiny_model)
    source = ipc_sender([], policy)._ipc_source()
    assert isinstance(source, ModuleIpcSource) and source.model is policy.model
    assert [spec.name for spec in source.weight_specs()] == list(policy.trainable_state_dict())


def test_fsdp2_policy_ranks_pack_on_their_own_gpus_rather_than_in_the_driver():
    from skyrl_train.distributed.worker_groups import PolicyWorkerGroup

    group = PolicyWorkerGroup(actors=None, uses_lora=False)
    assert ipc_sender([], group)._ipc_source() is group


# -- FSDP2 shards, gathered weight by weight on two gloo ranks --------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pack_on_rank(rank: int, port: int, model_path: str, out: dict) -> None:
    from types import SimpleNamespace

    from skyrl_train.distributed.fsdp import FSDPSetup, shard_model
    from skyrl_train.models import load_causal_lm
    from skyrl_train.weight_sync.packing import chunk_specs

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        model = load_causal_lm(model_path)
        shard_model(model, FSDPSetup(SimpleNamespace(), "cpu", bf16=False, role="policy"))
        source = ModuleIpcSource(model)
        unpacked = {}
        for chunk in chunk_specs(source.weight_specs(), 2**20):
            buffer, specs, offsets = source.pack_full_weights([spec.name for spec in chunk], "cpu")
            request = CudaIpcWeightUpdateRequest.for_specs(specs, 0, offsets=offsets)
            unpacked.update({name: tensor.clone() for name, tensor in unpack(buffer, request)})
        out[rank] = unpacked
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two spawned processes that load and shard the tiny model: ~20 s on 2 cores
def test_fsdp2_ranks_each_pack_the_full_weights_gathered_from_the_shards(tiny_model):
    from skyrl_train.models import load_causal_lm

    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_pack_on_rank, args=(_free_port(), tiny_model, out), nprocs=2)
        packed = dict(out)

    expected = {name: p for name, p in load_causal_lm(tiny_model).named_parameters()}
    for rank in (0, 1):
        assert list(packed[rank]) == list(expected)
        for name, param in expected.items():
            assert torch.equal(packed[rank][name], param.detach()), (rank, name)
