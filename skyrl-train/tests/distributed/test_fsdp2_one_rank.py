"""The fsdp2 policy worker on one rank in this process (a 1-process gloo group), so these run in the fast suite:

- HF exports are written in the training dtype (``trainer.bf16``), as the single strategy writes them, even when the
  sharded weights are fp32 masters (the GPU mixed-precision layout, built here on CPU);
- an update whose micro-batch rows share a long prompt prefix (the n samples of one GRPO prompt) trains, and equals
  the single-process update (which computes that prefix once; the sharded worker cannot, see ``FSDPPolicyWorker``);
- on CPU ranks, ``trainer.bf16`` trains under bf16 autocast over fp32 masters, as the single strategy does.
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
from safetensors import safe_open

from skyrl_train.config.schema import TrainerConfig
from skyrl_train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
from skyrl_train.distributed.fsdp import FSDPSetup
from skyrl_train.distributed.fsdp_workers import FSDPPolicyWorker
from skyrl_train.distributed.worker_actors import model_dtype
from skyrl_train.testing import tiny_model_path
from skyrl_train.utils.device import precision
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
        return {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (safe_open has keys(), no __iter__)


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


def update_batch(prompts: list[list[int]], g: torch.Generator):
    """The four ``prompts`` with random 3-token responses, all loss tokens, advantages 1, -1, 0.5, -0.5."""
    responses = [torch.randint(1, 1000, (3,), generator=g).tolist() for _ in range(4)]
    batch = convert_prompts_responses_to_batch_tensors(0, prompts, responses, [0.0] * 4, [[1, 1, 1]] * 4)
    batch["advantages"] = torch.tensor([[1.0] * 3, [-1.0] * 3, [0.5] * 3, [-0.5] * 3])
    return batch


def lora_trainer() -> TrainerConfig:
    """The tiny model with a rank-4 adapter, lr 1e-2, no KL."""
    t = TrainerConfig()
    t.policy.model.path = tiny_model_path()
    t.policy.model.lora.rank = 4
    t.policy.optimizer_config.lr = 1e-2
    t.algorithm.use_kl_loss = False
    return t


def test_an_update_on_rows_sharing_a_long_prompt_prefix_trains_like_the_single_worker(one_rank_group, assert_close):
    g = torch.Generator().manual_seed(3)
    shared = torch.randint(1, 1000, (40,), generator=g).tolist()  # longer than the 32 tokens that trigger sharing
    batch = update_batch([shared + torch.randint(1, 1000, (1 + i % 3,), generator=g).tolist() for i in range(4)], g)
    t = lora_trainer()

    def update(worker) -> dict[str, torch.Tensor]:
        for _ in range(2):  # the second update also runs on weights the first one changed
            rows = batch.select(["sequences", "attention_mask", "response_mask", "loss_mask", "advantages"])
            worker.ppo_train(rows, 4, 2)
        return {name: p.detach().clone() for name, p in worker.model.named_parameters() if p.requires_grad}

    torch.manual_seed(0)
    setup = FSDPSetup(t.policy.fsdp_config, "cpu", bf16=False, role="policy")
    sharded = update(FSDPPolicyWorker(setup, t.policy, t.algorithm, dtype="float32"))
    torch.manual_seed(0)
    single = update(PolicyWorker(t.policy, t.algorithm, dtype="float32"))
    assert sharded.keys() == single.keys()
    for name, weight in single.items():
        assert_close(sharded[name].full_tensor(), weight, name)


def test_a_cpu_rank_in_bf16_trains_under_autocast_over_fp32_masters_like_the_single_worker(one_rank_group):
    """trainer.bf16 on CPU ranks: the rank's weights as its actor builds them (`model_dtype`: fp32), no FSDP mixed
    precision, the forwards under the autocast `utils.device.precision` gives the single strategy: the same update as
    the single worker's, and not the fp32 one."""
    g = torch.Generator().manual_seed(4)
    batch = update_batch([torch.randint(1, 1000, (3 + i,), generator=g).tolist() for i in range(4)], g)
    t = lora_trainer()
    t.bf16 = True
    setup = FSDPSetup(t.policy.fsdp_config, "cpu", t.bf16, "policy")
    assert not setup.mixed_precision
    arguments = {"dtype": model_dtype(t, "cpu"), "autocast_dtype": precision(t.bf16, "cpu").autocast}
    assert arguments == {"dtype": torch.float32, "autocast_dtype": torch.bfloat16}

    def update(worker) -> dict[str, torch.Tensor]:
        rows = batch.select(["sequences", "attention_mask", "response_mask", "loss_mask", "advantages"])
        worker.ppo_train(rows, 4, 2)
        return {name: p.detach().clone() for name, p in worker.model.named_parameters() if p.requires_grad}

    torch.manual_seed(0)
    sharded = update(FSDPPolicyWorker(setup, t.policy, t.algorithm, **arguments))
    torch.manual_seed(0)
    single = update(PolicyWorker(t.policy, t.algorithm, **arguments))
    torch.manual_seed(0)
    fp32 = update(PolicyWorker(t.policy, t.algorithm, dtype=torch.float32))
    assert sharded.keys() == single.keys()
    for name, weight in single.items():
        assert sharded[name].dtype == torch.float32
        torch.testing.assert_close(sharded[name].full_tensor(), weight, atol=1e-6, rtol=1e-5, msg=name)
    assert any(not torch.equal(single[name], fp32[name]) for name in single)
