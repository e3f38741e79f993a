"""A batch that gets one optimizer step takes its old logprobs from the update's own forward pass: the trainer skips
the separate old-logprob forward, and the step is the same as with it (loss, metrics, updated weights).

Each test runs one real step twice on the same rollouts (``run_one_step``, ``replay``): as the trainer decides
(one mini-batch, one epoch: skipped) and with the separate forward forced. The timing of the forward phase is
logged only when one of its forwards runs.
"""

from __future__ import annotations

import pytest

from skyrl_train.trainer import PPOTrainer

PHASE = "timing/fwd_logprobs_values_reward"


@pytest.mark.parametrize(
    ("overrides", "phase_runs"),
    [
        ((), False),  # full fine-tuning, nothing else to compute before the update
        (("trainer.policy.model.lora.rank=8", "trainer.algorithm.use_kl_loss=true"), True),  # LoRA, ref logprobs
        (  # every forward packed without padding, the mini-batch's shared prefix once for its micro-batches
            (
                "trainer.policy.model.lora.rank=8",
                "trainer.algorithm.use_kl_loss=true",
                "trainer.use_sample_packing=true",
            ),
            True,
        ),
    ],
    ids=["full", "lora-with-ref", "lora-with-ref-packed"],
)
def test_skipping_the_old_logprob_forward_gives_the_same_step(
    run_one_step, replay, max_relative_difference, monkeypatch, overrides, phase_runs
):
    skipped = run_one_step("skipped", *overrides, edit_output=replay.record)
    monkeypatch.setattr(PPOTrainer, "_old_logprobs_from_update", lambda self, mini_batch_rows, rows: False)
    separate = run_one_step("separate", *overrides, edit_output=replay.replay)

    assert skipped.metrics["policy/old_logprobs_from_update_forward"] == 1.0
    assert separate.metrics["policy/old_logprobs_from_update_forward"] == 0.0
    assert (PHASE in skipped.metrics, PHASE in separate.metrics) == (phase_runs, True)
    for key in ("policy/policy_loss", "policy/final_loss", "policy/grad_norm", "policy/policy_entropy"):
        assert skipped.metrics[key] == pytest.approx(separate.metrics[key], rel=1e-5, abs=1e-7), key
    if phase_runs:
        assert skipped.metrics["policy/policy_kl"] == pytest.approx(separate.metrics["policy/policy_kl"], abs=1e-7)
    assert skipped.metrics["policy/grad_norm"] > 0
    assert max_relative_difference(skipped.weights, separate.weights) < 1e-5


def test_two_mini_batches_need_the_separate_forward(run_one_step, replay):
    run = run_one_step("two", "trainer.policy_mini_batch_size=1", edit_output=replay.record)
    assert run.metrics["policy/old_logprobs_from_update_forward"] == 0.0
    assert PHASE in run.metrics
