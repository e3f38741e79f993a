"""Off-policy correction in a real training step: the hf engine's fp32 rollout logprobs make it the identity, and
deliberately perturbed rollout logprobs show up in its metrics and change the update.

Each run is one step of ``run_one_step`` (tiny model, hf engine, real gsm8k env and generator, ``BasePPOExp``) with
token TIS (cap 2) and the geometric sequence mask (default bounds 0.99 .. 1.01), on the rollouts of the first run
(``replay``). The
perturbed run lowers the rollout logprobs of rows 0 and 2 by 0.7 on every token, i.e. importance ratios
``exp(0.7) = 2.01`` there: above the TIS cap and outside the geometric bounds.
"""

from __future__ import annotations

import math

import pytest

CORRECTION = (
    "trainer.algorithm.off_policy_correction.tis_ratio_type=token",
    "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high=2.0",
    "trainer.algorithm.off_policy_correction.sequence_mask_metric=geometric",
)
SHIFT = 0.7
PERTURBED_ROWS = (0, 2)


def _perturb(output) -> None:
    for row in PERTURBED_ROWS:
        output["rollout_logprobs"][row] = [lp - SHIFT for lp in output["rollout_logprobs"][row]]


def test_fp32_hf_rollouts_make_the_correction_the_identity_and_perturbed_ones_are_capped_and_masked(
    run_one_step, replay, max_relative_difference
):
    plain = run_one_step("plain", edit_output=replay.record)
    corrected = run_one_step("corrected", *CORRECTION, edit_output=replay.replay)
    perturbed = run_one_step("perturbed", *CORRECTION, edit_output=lambda output: _perturb(replay.replay(output)))

    masks = corrected.generated["loss_masks"]
    assert all(sum(mask) > 0 for mask in masks)  # every row has loss tokens: 4 rows in the statistics
    m = corrected.metrics
    # Identity: the engine's logprobs are the trainer's (fp32) up to float noise, so nothing is capped or masked.
    # (measured: every ratio within 1e-6 of 1)
    assert m["policy/loss_metrics/is_ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert 1.0 <= m["policy/loss_metrics/is_ratio_max"] < 1.0001
    assert 0.9999 < m["policy/loss_metrics/is_ratio_min"] <= 1.0
    assert m["policy/loss_metrics/tis_token_clip_high_ratio"] == 0.0
    assert m["policy/loss_metrics/geo_sequence_mask_masked_ratio"] == 0.0
    assert m["policy/old_logprobs_from_update_forward"] == 1.0
    assert m["policy/policy_loss"] == pytest.approx(plain.metrics["policy/policy_loss"], rel=1e-3, abs=1e-6)
    assert max_relative_difference(corrected.weights, plain.weights) < 5e-5  # float noise: 1.1e-5 seen on an AVX2 CPU
    assert not [key for key in plain.metrics if "is_ratio" in key]

    p = perturbed.metrics
    perturbed_tokens = sum(sum(masks[row]) for row in PERTURBED_ROWS)
    assert p["policy/loss_metrics/tis_token_clip_high_ratio"] == pytest.approx(perturbed_tokens / sum(map(sum, masks)))
    assert p["policy/loss_metrics/geo_sequence_mask_masked_ratio"] == pytest.approx(2 / 4)
    assert p["policy/loss_metrics/geo_sequence_mask_over_high_ratio"] == pytest.approx(2 / 4)
    assert p["policy/loss_metrics/is_ratio_max"] == pytest.approx(math.exp(SHIFT), rel=1e-3)
    # Rows 0 and 2 are dropped from the loss: the update is another one.
    assert max_relative_difference(perturbed.weights, corrected.weights) > 1e-3
