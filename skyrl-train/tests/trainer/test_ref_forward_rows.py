"""The reference forward covers only the rows that have a loss token, with the KL in the loss or in the reward (both
taken on loss tokens): a group the zero-variance filter dropped costs no reference forward, and the step is the same as
with the forward over every row. With `zero_variance_kl_rows`, the first trajectories of
a dropped group stay in the loss for the KL term alone (advantage 0), and get their reference forward.

Each run is one real step (``run_one_step``) on the same rollouts, whose second GRPO group has equal rewards.
"""

from __future__ import annotations

import pytest
import torch

from skyrl_train import trainer as trainer_module
from skyrl_train.testing import tiny_model_path
from skyrl_train.trainer_utils import _first_trajectories
from skyrl_train.training_batch import TrainingInputBatch
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


def test_the_kl_in_the_reward_is_taken_on_the_rows_with_a_loss_token_too(run_one_step, ref_rows, monkeypatch):
    in_reward = (*FILTERED, "trainer.algorithm.use_kl_in_reward=true")
    rollouts = RolloutReplay(SECOND_GROUP_EQUAL)
    skipped = run_one_step("in_reward", *in_reward, edit_output=rollouts.record)
    monkeypatch.setattr(trainer_module, "rows_with_loss", lambda mask, dp: torch.arange(mask.shape[0]))
    every_row = run_one_step("in_reward_every_row", *in_reward, edit_output=rollouts.replay)

    assert ref_rows == [2, 4]
    assert skipped.metrics["loss/avg_kl"] == every_row.metrics["loss/avg_kl"]
    for key in ("policy/policy_loss", "policy/grad_norm"):
        assert skipped.metrics[key] == pytest.approx(every_row.metrics[key], rel=1e-5, abs=1e-7), key


def test_a_dropped_groups_first_trajectory_stays_in_the_loss_for_the_kl_alone(run_one_step, ref_rows, tmp_path):
    overrides = (
        *FILTERED,
        "trainer.algorithm.use_kl_loss=true",
        "trainer.algorithm.zero_variance_kl_rows=1",
        "trainer.dump_data_batch=true",
    )
    anchored = run_one_step("anchored", *overrides, edit_output=RolloutReplay(SECOND_GROUP_EQUAL).record)

    assert ref_rows == [3]
    assert anchored.metrics["trainer/zero_variance_filtered_fraction"] == 0.5
    assert anchored.metrics["trainer/zero_variance_kl_only_fraction"] == 0.25
    (dumped,) = (tmp_path / "anchored" / "exports" / "dumped_data").glob("*_training_input.pkl")
    batch = TrainingInputBatch.load(dumped)
    assert batch["kl_only"].tolist() == [False, False, True, False]
    loss_tokens = batch["loss_mask"].sum(dim=-1)
    assert (loss_tokens[:3] > 0).all() and loss_tokens[3] == 0
    assert batch["advantages"][0].abs().sum() > 0 and (batch["advantages"][2] == 0).all()
    assert (batch["base_action_log_probs"][2][batch["loss_mask"][2] > 0] < 0).all()


def test_the_kl_rows_are_counted_per_trajectory_in_step_wise_batches():
    # Two groups of two trajectories; group "b" is dropped. Its first trajectory has rows 3 and 4 (two turns).
    dropped = torch.tensor([False, False, False, True, True, True])
    is_last_step = torch.tensor([True, False, True, False, True, True])
    uids = ["a", "a", "a", "b", "b", "b"]
    assert _first_trajectories(dropped, uids, is_last_step, 1).tolist() == [False, False, False, True, True, False]
    assert _first_trajectories(dropped, uids, is_last_step, 2).tolist() == [False, False, False, True, True, True]
    assert not _first_trajectories(dropped, uids, is_last_step, 0).any()


def test_the_kl_rows_pull_with_their_own_coefficient(run_one_step, max_relative_difference):
    # Full fine-tuning against a reference with other weights, so that the KL and its gradient are not zero at the
    # first step.
    other = tiny_model_path(seed=1)
    overrides = (
        "trainer.algorithm.zero_variance_filter=true",
        "trainer.algorithm.use_kl_loss=true",
        "trainer.algorithm.kl_loss_coef=0.0",
        "trainer.algorithm.zero_variance_kl_rows=1",
        f"trainer.ref.model.path={other}",
    )
    rollouts = RolloutReplay(SECOND_GROUP_EQUAL)
    free = run_one_step("free", *overrides, "trainer.algorithm.zero_variance_kl_coef=0.0", edit_output=rollouts.record)
    held = run_one_step("held", *overrides, "trainer.algorithm.zero_variance_kl_coef=5.0", edit_output=rollouts.replay)

    assert free.metrics["policy/policy_kl"] == pytest.approx(held.metrics["policy/policy_kl"], rel=1e-6)
    assert held.metrics["policy/policy_kl"] > 0
    assert held.metrics["policy/final_loss"] > free.metrics["policy/final_loss"]
    assert max_relative_difference(held.weights, free.weights) > 1e-4
