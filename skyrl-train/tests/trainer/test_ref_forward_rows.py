"""With the KL in the loss only, the reference forward covers only the rows that have a loss token: a group the
zero-variance filter dropped costs no reference forward, and the step is the same as with the forward over every row.
With the KL in the reward every row needs its reference logprobs.

Each run is one real step (``run_one_step``) on the same rollouts, whose second GRPO group has equal rewards.
"""

from __future__ import annotations

import pytest
import torch

from skyrl_train import trainer as trainer_module
from skyrl_train.workers.ref import RefWorker

from .conftest import RolloutReplay

FILTERED = ("trainer.policy.model.lora.rank=8", "trainer.algorithm.zero_variance_filter=true")
SECOND_GROUP_EQUAL = (1.0, 0.0, 1.0, 1.0)
"""Rewards of the 4 rows: the first GRPO group carries a signal, the filter drops the second."""


@pytest.fixture
def ref_rows(monkeypatch) -> list[int]:
    """The number of rows of every reference forward."""
    seen: list[int] = []
    forward = RefWorker.compute_logprobs

    def counted(self, batch, micro_batch_size):
        seen.append(batch.batch_size)
        return forward(self, batch, micro_batch_size)

    monkeypatch.setattr(RefWorker, "compute_logprobs", counted)
    return seen


def test_rows_without_a_loss_token_get_no_reference_forward_and_the_step_is_the_same(
    run_one_step, ref_rows, max_relative_difference, monkeypatch
):
    kl_loss = (*FILTERED, "trainer.algorithm.use_kl_loss=true", "trainer.algorithm.kl_loss_coef=0.5")
    rollouts = RolloutReplay(SECOND_GROUP_EQUAL)
    skipped = run_one_step("skipped", *kl_loss, edit_output=rollouts.record)
    monkeypatch.setattr(trainer_module, "rows_with_loss", lambda mask, dp: torch.arange(mask.shape[0]))
    every_row = run_one_step("every_row", *kl_loss, edit_output=rollouts.replay)

    assert ref_rows == [2, 4]
    assert skipped.metrics["trainer/zero_variance_filtered_fraction"] == 0.5
    for key in ("policy/policy_loss", "policy/policy_kl", "policy/final_loss", "policy/grad_norm"):
        assert skipped.metrics[key] == pytest.approx(every_row.metrics[key], rel=1e-5, abs=1e-7), key
    assert skipped.metrics["policy/grad_norm"] > 0
    assert max_relative_difference(skipped.weights, every_row.weights) < 1e-5


def test_the_kl_in_the_reward_needs_every_row(run_one_step, ref_rows):
    rollouts = RolloutReplay(SECOND_GROUP_EQUAL)
    run_one_step("in_reward", *FILTERED, "trainer.algorithm.use_kl_in_reward=true", edit_output=rollouts.record)
    assert ref_rows == [4]
