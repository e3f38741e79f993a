"""The broadcast path, the fallback for engines not colocated on the policy's GPUs: each member's tensors live on the
device its backend moves (`group_device`), and a gloo broadcast crosses processes: the trainer's `WeightSyncSender`
in this process, a `WeightReceiver` in a spawned engine process that gets every request as JSON."""

from __future__ import annotations

import asyncio

import pytest
import torch
import torch.multiprocessing as mp

from skyrl_train.weight_sync import WeightSyncSender
from skyrl_train.weight_sync.group import group_device

TIMEOUT_S = 60


def test_gloo_members_keep_their_tensors_on_the_cpu():
    assert group_device("gloo") == torch.device("cpu")


def test_nccl_members_use_their_current_cuda_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert group_device("nccl") == torch.device("cuda", 3)


def test_nccl_without_a_gpu_is_refused_pointing_at_gloo(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="torch sees no GPU .* generator.weight_sync_backend=gloo"):
        group_device("nccl")


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="'gloo' or 'nccl', got 'mpi'"):
        group_device("mpi")


def _engine_process(conn) -> None:
    """An engine worker: joins the group, receives every broadcast request, returns what it received on `destroy`
    as ``{name: (device, tensor)}`` and ends on `exit` (its tensors travel through shared memory it must keep until
    the trainer has them)."""
    from skyrl_train.weight_sync import WeightReceiver, WeightSyncInitInfo, WeightUpdateRequest

    receiver = None
    received = {}
    while True:
        command, payload = conn.recv()
        if command == "init":
            receiver = WeightReceiver(WeightSyncInitInfo.from_json(payload))
            conn.send(None)
        elif command == "update":
            for name, tensor in receiver.receive(WeightUpdateRequest.from_json(payload)):
                received[name] = (str(tensor.device), tensor)
            conn.send(None)
        elif command == "destroy":
            receiver.close()
            conn.send(received)
        else:
            return


class ProcessEngine:
    """The trainer's handle on the engine process (what a remote or Ray engine is: requests cross as JSON)."""

    def __init__(self, conn, process):
        self.conn = conn
        self.process = process
        self.received: dict[str, tuple[str, torch.Tensor]] = {}

    def _call(self, command: str, payload):
        self.conn.send((command, payload))
        for _ in range(TIMEOUT_S):
            if self.conn.poll(1):
                return self.conn.recv()
            if not self.process.is_alive():
                raise RuntimeError(f"the engine process died on {command!r} (exit code {self.process.exitcode})")
        raise TimeoutError(f"the engine process did not answer {command!r}")

    def weight_sync_ranks(self) -> int:
        return 1

    async def init_weight_update_communicator(self, info) -> None:
        # The sole engine: rank 1 (`InferenceEngineClient` hands each engine its part of the group this way).
        await asyncio.to_thread(self._call, "init", info.for_engine(0, 1).to_json())

    async def update_named_weights(self, request) -> None:
        await asyncio.to_thread(self._call, "update", request.to_json())

    async def destroy_weights_update_group(self) -> None:
        self.received = await asyncio.to_thread(self._call, "destroy", None)

    async def reset_prefix_cache(self) -> None:
        pass


class MixedWeights:
    """A policy whose trainable weights mix dtypes (bf16 of odd size first)."""

    uses_lora = False

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.state = {
            "norm.weight": torch.randn(5, 7, generator=g).to(torch.bfloat16),
            "proj.weight": torch.randn(3, 3, generator=g),
            "steps": torch.tensor([3, -1, 2**40], dtype=torch.int64),
            "half": torch.randn(3, generator=g).to(torch.float16),
        }

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        return self.state


async def test_a_gloo_broadcast_reaches_an_engine_in_another_process_bit_exact_on_its_cpu():
    context = mp.get_context("spawn")
    trainer_end, engine_end = context.Pipe()
    process = context.Process(target=_engine_process, args=(engine_end,), daemon=True)
    process.start()
    try:
        engine = ProcessEngine(trainer_end, process)
        policy = MixedWeights()
        sender = WeightSyncSender(engine, policy, "broadcast", backend="gloo", chunk_bytes=64, timeout_s=TIMEOUT_S)

        await sender.sync(weight_version=2)
        await sender.close()
        trainer_end.send(("exit", None))

        assert list(engine.received) == list(policy.state)
        for name, tensor in policy.state.items():
            device, received = engine.received[name]
            assert device == "cpu", name
            assert received.dtype == tensor.dtype, name
            assert torch.equal(received, tensor), name
        process.join(TIMEOUT_S)
        assert process.exitcode == 0
    finally:
        if process.is_alive():
            process.kill()
