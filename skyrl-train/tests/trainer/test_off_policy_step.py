"""Off-policy correction in a real training step: the hf engine's fp32 rollout logprobs make it the identity, and
deliberately perturbed rollout logprobs show up in its metrics and change the update.

Each run is one step of ``run_one_step`` (tiny model, hf engine, real gsm8k env and generator, ``BasePPOExp``) with
token TIS (cap 2) and the geometric sequence mask (default bounds 0.99 .. 1.01). The first run's rollouts are
recorded, with rewards 1, 0, 0, 1 so that every GRPO group has an advantage signal (the random tiny model never
solves gsm8k), and replayed in the other runs (continuous batching makes sampling depend on request timing). The
perturbed run lowers the rollout logprobs of rows 0 and 2 by 0.7 on every token, i.e. importance ratios
``exp(0.7) = 2.01`` there: above the TIS cap and outside the geometric bounds.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

CORRECTION = (
    "trainer.algorithm.off_policy_correction.tis_ratio_type=token",
    "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high=2.0",
    "trainer.algorithm.off_policy_correction.sequence_mask_metric=geometric",
)
SHIFT = 0.7
PERTURBED_ROWS = (0, 2)


class Replay:
    """``record`` sets the rewards and keeps the output; ``replay`` puts a copy of it in place of a new one."""

    def __init__(self):
        self.recorded = None

    def record(self, output) -> None:
        output["rewards"] = [1.0, 0.0, 0.0, 1.0]
        self.recorded = copy.deepcopy(output)

    def replay(self, output) -> None:
        output.clear()
        output.update(copy.deepcopy(self.recorded))

    def replay_perturbed(self, output) -> None:
        self.replay(output)
        for row in PERTURBED_ROWS:
            output["rollout_logprobs"][row] = [lp - SHIFT for lp in output["rollout_logprobs"][row]]


def _max_relative_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[name] - b[name]).norm() / b[name].norm()) for name in b)


def test_fp32_hf_rollouts_make_the_correction_the_identity_and_perturbed_ones_are_capped_and_masked(run_one_step):
    rollouts = Replay()
    plain = run_one_step("plain", edit_output=rollouts.record)
    corrected = run_one_step("corrected", *CORRECTION, edit_output=rollouts.replay)
    perturbed = run_one_step("perturbed", *CORRECTION, edit_output=rollouts.replay_perturbed)

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
    assert _max_relative_difference(corrected.weights, plain.weights) < 1e-5
    assert not [key for key in plain.metrics if "is_ratio" in key]

    p = perturbed.metrics
    perturbed_tokens = sum(sum(masks[row]) for row in PERTURBED_ROWS)
    assert p["policy/loss_metrics/tis_token_clip_high_ratio"] == pytest.approx(perturbed_tokens / sum(map(sum, masks)))
    assert p["policy/loss_metrics/geo_sequence_mask_masked_ratio"] == pytest.approx(2 / 4)
    assert p["policy/loss_metrics/geo_sequence_mask_over_high_ratio"] == pytest.approx(2 / 4)
    assert p["policy/loss_metrics/is_ratio_max"] == pytest.approx(math.exp(SHIFT), rel=1e-3)
    # Rows 0 and 2 are dropped from the loss: the update is another one.
    assert _max_relative_difference(perturbed.weights, corrected.weights) > 1e-3
