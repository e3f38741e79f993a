"""Reward metrics: hand-computed values for every definition."""

import pytest

from skyrl_gym.common.outcomes import trajectory_outcome, trajectory_return
from skyrl_train.metrics import compute_reward_metrics, sanitize_metric_key


def test_return_and_outcome_of_scalar_and_token_level_rewards():
    assert (trajectory_return(0.5), trajectory_outcome(0.5)) == (0.5, 0.5)
    assert (trajectory_return([0.1, 0.0, 1.0]), trajectory_outcome([0.1, 0.0, 1.0])) == (pytest.approx(1.1), 1.0)
    assert (trajectory_return([0.3, 0.0]), trajectory_outcome([0.3, 0.0])) == (0.3, 0.0)


def test_metrics_over_two_prompts_of_two_samples():
    # uid a: returns 1.0 and 0.0 -> solved, variance 0.25, has signal
    # uid b: returns -0.5 and -0.5 -> not solved, variance 0, no signal
    rewards = [1.0, 0.0, -0.5, -0.5]
    metrics = compute_reward_metrics(rewards, ["a", "a", "b", "b"], n_samples_per_prompt=2)
    assert metrics == {
        "avg_raw_reward": pytest.approx(0.0),
        "pass_at_2": 0.5,
        "mean_positive_reward": 0.25,
        "infra_failure_rate": 0.0,
        "variance_per_prompt": 0.125,
        "signal_ratio": 0.5,
    }


def test_pass_at_n_uses_the_last_token_outcome_of_token_level_rewards():
    # a partial reward earlier in the trajectory does not count as solving it
    metrics = compute_reward_metrics([[0.2, 0.0], [0.0, 0.0]], ["a", "a"], n_samples_per_prompt=2)
    assert metrics["pass_at_2"] == 0.0
    assert metrics["avg_raw_reward"] == pytest.approx(0.1)
    assert metrics["mean_positive_reward"] == pytest.approx(0.1)


def test_per_data_source_keys_are_sanitized():
    metrics = compute_reward_metrics(
        [1.0, 0.0, 0.0],
        ["a", "a", "b"],
        n_samples_per_prompt=2,
        data_sources=["math/easy", "math/easy", None],
    )
    assert metrics["math_easy/pass_at_2"] == 1.0
    assert metrics["math_easy/avg_raw_reward"] == 0.5
    assert metrics["unknown/pass_at_2"] == 0.0
    assert metrics["unknown/variance_per_prompt"] == 0.0  # a single sample has no variance to report
    assert sanitize_metric_key("a/b/c") == "a_b_c"


def test_infra_failures_count_as_unsolved_zero_return_trajectories():
    # uid a: a solved sample and an infrastructure failure whose env had paid 0.5 before it crashed;
    # uid b: its only sample is an infrastructure failure whose env reported success before crashing.
    metrics = compute_reward_metrics(
        [1.0, 0.5, 1.0],
        ["a", "a", "b"],
        n_samples_per_prompt=2,
        infra_failed=[False, True, True],
        env_metrics=[None, None, {"success": 1}],
    )
    assert metrics["avg_raw_reward"] == pytest.approx(1 / 3)  # (1 + 0 + 0) / 3
    assert metrics["pass_at_2"] == 0.5  # a is solved, b is not: a crash never raises success
    assert metrics["mean_positive_reward"] == pytest.approx(1 / 3)
    assert metrics["infra_failure_rate"] == pytest.approx(2 / 3)
    assert metrics["variance_per_prompt"] == 0.0  # a has one completed sample: no variance to report
    assert metrics["signal_ratio"] == 0.0


def test_signal_diagnostics_are_over_completed_trajectories():
    # uid a: completed returns 1.0 and 0.0 (variance 0.25, signal) and one failure left out of both figures
    metrics = compute_reward_metrics([1.0, 0.0, 0.0], ["a", "a", "a"], 3, infra_failed=[False, False, True])
    assert (metrics["variance_per_prompt"], metrics["signal_ratio"]) == (0.25, 1.0)


def test_every_trajectory_failing_gives_zero_success_and_a_full_failure_rate():
    metrics = compute_reward_metrics([0.0, 0.0], ["a", "b"], 1, infra_failed=[True, True])
    assert (metrics["pass_at_1"], metrics["avg_raw_reward"], metrics["infra_failure_rate"]) == (0.0, 0.0, 1.0)


def test_no_trajectory_gives_no_metrics():
    assert compute_reward_metrics([], [], 1) == {}


def test_pass_at_n_uses_the_envs_success_metric_when_it_reports_one():
    # Both prompts earn positive (graded) rewards, but only prompt "b" has a trajectory the env calls a success.
    metrics = compute_reward_metrics(
        [0.3, 0.3, 0.3, 1.0],
        ["a", "a", "b", "b"],
        2,
        env_metrics=[{"success": 0}, {"success": 0}, {"success": 0}, {"success": 1}],
    )
    assert metrics["pass_at_2"] == 0.5


def test_pass_at_n_falls_back_to_a_positive_outcome_without_a_success_metric():
    metrics = compute_reward_metrics([0.3, 0.0], ["a", "b"], 1, env_metrics=[{"turns": 2}, {}])
    assert metrics["pass_at_1"] == 0.5
