"""The decisions the typed trainer config makes once for validation, the strategies and the worker groups: does the
run need a reference model, is it a model of its own, does the strategy run on Ray actors, and the training dtype."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config.schema import TrainerConfig


def trainer(*, kl_loss: bool = False, kl_in_reward: bool = False, lora_rank: int = 0) -> TrainerConfig:
    t = TrainerConfig()
    t.algorithm.use_kl_loss, t.algorithm.use_kl_in_reward = kl_loss, kl_in_reward
    t.policy.model.lora.rank = lora_rank
    return t


@pytest.mark.parametrize(
    ("kl_loss", "kl_in_reward", "needs_ref"), [(True, False, True), (False, True, True), (False, False, False)]
)
def test_a_reference_is_needed_exactly_when_a_kl_term_is_on(kl_loss, kl_in_reward, needs_ref):
    assert trainer(kl_loss=kl_loss, kl_in_reward=kl_in_reward).needs_ref is needs_ref


@pytest.mark.parametrize(("kl_loss", "lora_rank", "separate"), [(True, 0, True), (True, 8, False), (False, 0, False)])
def test_the_reference_is_a_model_of_its_own_only_for_a_policy_without_lora(kl_loss, lora_rank, separate):
    assert trainer(kl_loss=kl_loss, lora_rank=lora_rank).separate_ref_model is separate


@pytest.mark.parametrize(("strategy", "distributed"), [("single", False), ("fsdp2", True)])
def test_only_fsdp2_runs_the_workers_on_ray_actors(strategy, distributed):
    t = TrainerConfig()
    t.strategy = strategy
    assert t.distributed is distributed


@pytest.mark.parametrize(
    ("bf16", "device", "dtype"),
    [
        (None, "cpu", torch.float32),
        (None, "cuda", torch.bfloat16),
        (False, "cuda:1", torch.float32),
        (True, "cpu", torch.float32),  # bf16 on the CPU is autocast over fp32 weights
    ],
)
def test_the_training_dtype_of_the_weights_is_bf16_on_cuda_only(bf16, device, dtype):
    t = TrainerConfig()
    t.bf16 = bf16
    assert t.training_dtype(device) == dtype
