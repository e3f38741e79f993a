"""`timing/step` is the whole training step: the generation of its rollouts, the update and the bookkeeping after
it (as upstream SkyRL's step timer), so that summing it over a run gives the run's training time."""

from __future__ import annotations

import time

GENERATION_DELAY_S = 0.5


def test_step_time_includes_generation_and_update(run_one_step):
    run = run_one_step("timed", edit_output=lambda output: time.sleep(GENERATION_DELAY_S))

    metrics = run.metrics
    assert metrics["timing/generate"] >= GENERATION_DELAY_S
    assert metrics["timing/policy_train"] > 0
    assert metrics["timing/step"] >= metrics["timing/generate"] + metrics["timing/policy_train"]
