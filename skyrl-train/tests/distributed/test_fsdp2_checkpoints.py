"""FSDP2 checkpoints, HF export and the driver's inference copy, on a real local Ray cluster (slow, ~2 min).

One LoRA policy trains a step on the machine's ranks (``machine_ranks``: 2 gloo ranks on CPU, one per GPU on a GPU
machine); the driver's copy (what the hf engine generates from) follows it; the sharded checkpoint resumes on ONE
rank with the same weights and optimizer state, so the next step matches the multi-rank run's next step; the HF
export from rank 0 is the merged model. Skipped on a machine that gives fewer than 2 ranks (nothing to reshard).
"""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config.schema import TrainerConfig
from skyrl_train.distributed.engine_sync import DriverPolicyCopy
from skyrl_train.distributed.fsdp_workers import DCP_DIR
from skyrl_train.distributed.worker_groups import build_fsdp_workers
from skyrl_train.models import load_causal_lm
from skyrl_train.testing import tiny_model_path
from skyrl_train.testing.ray import local_ray, machine_ranks  # noqa: F401
from skyrl_train.workers import batched_response_logprobs

RANKS = machine_ranks()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.gpu,
    pytest.mark.usefixtures("local_ray"),
    pytest.mark.skipif(
        RANKS < 2, reason=f"resharding onto one rank needs 2 ranks to save on; this machine gives {RANKS}"
    ),
]


def lora_config(workers: int) -> TrainerConfig:
    t = TrainerConfig()
    t.strategy = "fsdp2"
    t.placement.colocate_all = False
    t.placement.policy_num_gpus_per_node = workers
    t.policy.model.path = t.ref.model.path = tiny_model_path()
    t.policy.model.lora.rank = 8
    opt = t.policy.optimizer_config
    opt.lr, opt.weight_decay, opt.scheduler = 1e-3, 0.0, "constant"
    t.algorithm.use_kl_loss = False
    t.algorithm.max_seq_len = 11
    t.gradient_checkpointing = t.bf16 = False
    return t


def train_step(policy, batch):
    batch = batch.select(["sequences", "attention_mask", "response_mask", "loss_mask", "advantages"])
    batch["action_log_probs"] = policy.compute_logprobs(batch, 1)
    return policy.ppo_train(batch, 4, 1)


def test_checkpoint_resumes_on_one_rank_and_the_driver_copy_and_export_follow_the_ranks(
    tmp_path, make_batch, assert_close
):
    batch = make_batch()
    policy, _, _ = build_fsdp_workers(lora_config(RANKS), temperature=1.0, num_training_steps=10)
    try:
        copy = DriverPolicyCopy(lora_config(RANKS).policy, policy)
        train_step(policy, batch)
        copy.sync()
        after_one_step = policy.trainable_state_dict()
        assert_close(batched_response_logprobs(copy.model, batch, 2, 1.0), policy.compute_logprobs(batch, 2), "copy")

        policy.save_checkpoint(tmp_path / "ckpt")
        policy.export_hf(tmp_path / "hf")
        train_step(policy, batch)
        after_two_steps = policy.trainable_state_dict()
    finally:
        policy.actors.kill()

    shards = sorted(p.name for p in (tmp_path / "ckpt" / DCP_DIR).iterdir())
    assert shards == [".metadata", *(f"__{rank}_0.distcp" for rank in range(RANKS))]
    exported = load_causal_lm(tmp_path / "hf")
    assert_close(
        batched_response_logprobs(exported, batch, 2, 1.0),
        batched_response_logprobs(copy.model, batch, 2, 1.0),
        "export",
    )

    one_rank, _, _ = build_fsdp_workers(lora_config(1), temperature=1.0, num_training_steps=10)
    try:
        copy_of_one = DriverPolicyCopy(lora_config(1).policy, one_rank)
        one_rank.load_checkpoint(tmp_path / "ckpt")
        for name, value in after_one_step.items():
            assert torch.equal(one_rank.trainable_state_dict()[name], value), name
            assert torch.equal(copy_of_one.model.state_dict()[name], value), name  # synced after the load
        train_step(one_rank, batch)
        resumed = one_rank.trainable_state_dict()
    finally:
        one_rank.actors.kill()
    for name, value in after_two_steps.items():
        assert_close(resumed[name], value, name)
