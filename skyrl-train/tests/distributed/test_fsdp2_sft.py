"""Acceptance: an SFT step (`cross_entropy`, token mean over the whole batch) on ``fsdp2`` ranks of a real local Ray
cluster equals the single-process step: loss, top-1 accuracy, gradient norm and updated weights, LoRA and full
fine-tuning (the same tolerances and learning rates as `test_fsdp2_matches_single`), and the eval loss."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.distributed.worker_groups import build_fsdp_workers
from skyrl_train.testing.ray import local_ray, machine_ranks  # noqa: F401
from skyrl_train.workers import PolicyWorker

from .test_fsdp2_matches_single import trainable, trainer_config

pytestmark = [pytest.mark.slow, pytest.mark.gpu, pytest.mark.usefixtures("local_ray")]

BATCH, MICRO_BATCH = 8, 2
RANKS = machine_ranks(at_most=BATCH // MICRO_BATCH)


@pytest.mark.parametrize("lora_rank", [8, 0], ids=["lora", "full"])
def test_fsdp2_sft_step_equals_single_step(lora_rank: int, make_batch, assert_close):
    t = trainer_config(lora_rank, use_kl_loss=False, fsdp_size=-1, reshard_after_forward=True, ranks=RANKS)
    torch.manual_seed(t.seed)
    single = PolicyWorker(t.policy, t.algorithm, num_training_steps=10)
    initial = trainable(single)
    expected_eval = single.sft_eval(make_batch(), MICRO_BATCH)
    expected = single.sft_train(make_batch(), MICRO_BATCH)

    policy, ref, critic = build_fsdp_workers(t, temperature=1.0, num_training_steps=10)
    try:
        assert ref is None and critic is None and policy.world_size == RANKS
        evaluated = policy.sft_eval(make_batch(), MICRO_BATCH)
        metrics = policy.sft_train(make_batch(), MICRO_BATCH)
        weights = policy.trainable_state_dict()
    finally:
        policy.actors.kill()

    assert evaluated == pytest.approx(expected_eval, rel=1e-5)
    assert set(metrics) == set(expected)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    for name, value in trainable(single).items():
        assert_close(weights[name], value, name)
    assert any(not torch.equal(weights[name], value) for name, value in initial.items())
