"""fsdp2 HF exports are written in the training dtype (``trainer.bf16``), as the single strategy writes them, even
when the sharded weights are fp32 masters (the GPU mixed-precision layout, built here on CPU).

One FSDP2 rank in this process (a 1-process gloo group), so it runs in the fast suite (~5 s).
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
from safetensors import safe_open

from skyrl_train.config.schema import TrainerConfig
from skyrl_train.distributed.fsdp import FSDPSetup
from skyrl_train.distributed.fsdp_workers import FSDPPolicyWorker
from skyrl_train.testing import tiny_model_path
from skyrl_train.workers import PolicyWorker


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def exported_tensors(folder) -> dict[str, torch.Tensor]:
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}


@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full", "lora"])
def test_an_fsdp2_export_from_fp32_masters_is_bf16_with_trainer_bf16_like_the_single_export(
    tmp_path, one_rank_group, lora_rank
):
    t = TrainerConfig()
    t.policy.model.path = tiny_model_path()
    t.policy.model.lora.rank = lora_rank
    sharded = FSDPPolicyWorker(
        FSDPSetup(t.policy.fsdp_config, "cpu", bf16=True, role="policy"),
        t.policy,
        t.algorithm,
        export_dtype="bfloat16",
        dtype="float32",  # fp32 masters, as model_dtype() gives a GPU rank with trainer.bf16
    )
    assert {p.dtype for p in sharded.model.parameters()} == {torch.float32}
    sharded.export_hf(tmp_path / "fsdp2")
    PolicyWorker(t.policy, t.algorithm, dtype="bfloat16").export_hf(tmp_path / "single")

    fsdp2, single = exported_tensors(tmp_path / "fsdp2"), exported_tensors(tmp_path / "single")
    assert {tensor.dtype for tensor in fsdp2.values()} == {torch.bfloat16}
    assert fsdp2.keys() == single.keys()
    for name, tensor in single.items():  # fp32 -> bf16 rounding of the same weights gives the same values
        assert torch.equal(fsdp2[name], tensor), name


def test_an_fsdp2_export_without_bf16_stays_fp32(tmp_path, one_rank_group):
    t = TrainerConfig()
    t.policy.model.path = tiny_model_path()
    worker = FSDPPolicyWorker(
        FSDPSetup(t.policy.fsdp_config, "cpu", bf16=False, role="policy"), t.policy, t.algorithm, dtype="float32"
    )
    worker.export_hf(tmp_path / "hf")
    assert {tensor.dtype for tensor in exported_tensors(tmp_path / "hf").values()} == {torch.float32}
