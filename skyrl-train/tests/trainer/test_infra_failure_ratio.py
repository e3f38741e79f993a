"""`trainer.max_infra_failure_ratio`: a generation batch with too many infrastructure failures stops the run."""

from __future__ import annotations

import pytest

from skyrl_gym import InfraFailure
from skyrl_train.generators.base import GeneratorOutput
from skyrl_train.trainer import InfraFailureError, check_infra_failures
from skyrl_train.trainer_utils import Rollouts


def rollouts(
    stop_reasons: list[str], errors: dict[int, str], is_last_step: list[bool] | None = None, env: str = "mcp_tool"
) -> Rollouts:
    rows = len(stop_reasons)
    output = GeneratorOutput(
        prompt_token_ids=[[1]] * rows,
        response_ids=[[2]] * rows,
        rewards=[[0.0]] * rows,
        loss_masks=[[0]] * rows,
        stop_reasons=stop_reasons,
        rollout_logprobs=None,
        is_last_step=is_last_step,
        env_metrics=[{}] * rows,
        infra_failures=[InfraFailure(stop_reasons[i], errors[i]) if i in errors else None for i in range(rows)],
    )
    return Rollouts(output, [str(i // 2) for i in range(rows)], [env] * rows, [{}] * rows)


def test_step_over_ratio_stops_with_counts():
    batch = rollouts(
        ["env_init_failed", "timeout", "stop", "env_init_failed"],
        {0: "ConnectionError: tool server exited with status 1", 1: "timed out", 3: "ConnectionError: again"},
    )
    with pytest.raises(InfraFailureError) as stopped:
        check_infra_failures(batch, max_ratio=0.5)
    assert str(stopped.value) == (
        "3 of 4 trajectories ended in infrastructure failures, more than trainer.max_infra_failure_ratio=0.5: "
        "env_init_failed: 2, timeout: 1. First failure (env 'mcp_tool', prompt uid 0): "
        "ConnectionError: tool server exited with status 1"
    )


def test_at_the_ratio_training_goes_on():
    check_infra_failures(rollouts(["timeout", "stop"], {0: "timed out"}), max_ratio=0.5)


def failing(count: int, of: int) -> Rollouts:
    """`of` trajectories (one row each), the first `count` of them infrastructure failures."""
    return rollouts(["timeout"] * count + ["stop"] * (of - count), {i: "timed out" for i in range(count)})


def test_exactly_at_the_ratio_of_ten_training_goes_on():
    check_infra_failures(failing(3, of=10), max_ratio=0.3)


def test_one_failure_over_the_ratio_of_ten_stops():
    with pytest.raises(
        InfraFailureError, match=r"^4 of 10 trajectories .* more than trainer.max_infra_failure_ratio=0.3"
    ):
        check_infra_failures(failing(4, of=10), max_ratio=0.3)


def test_a_ratio_of_zero_stops_on_one_failure():
    with pytest.raises(InfraFailureError, match=r"^1 of 8 trajectories"):
        check_infra_failures(failing(1, of=8), max_ratio=0.0)


def test_a_ratio_of_one_never_stops():
    check_infra_failures(rollouts(["timeout", "timeout"], {0: "x", 1: "y"}), max_ratio=1.0)


def test_step_wise_counts_trajectories_not_turns():
    # Trajectory 0 ran 3 turns fine; trajectory 1 failed at init: 1 of 2 trajectories (not 1 of 4 rows).
    batch = rollouts(["length", "length", "stop", "env_init_failed"], {3: "boom"}, [False, False, True, True], env="e")
    check_infra_failures(batch, max_ratio=0.5)
    with pytest.raises(InfraFailureError, match=r"^1 of 2 trajectories .* \(env 'e', prompt uid 1\): boom$"):
        check_infra_failures(batch, max_ratio=0.4)
