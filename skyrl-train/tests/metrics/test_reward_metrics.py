"""Reward metrics: hand-computed values for every definition."""

import pytest

from skyrl_train.metrics import compute_reward_metrics, sanitize_metric_key, trajectory_outcome, trajectory_return


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


def test_excluded_trajectories_do_not_count():
    # the second sample of uid a was an infrastructure failure, scored 0 by the placeholder
    metrics = compute_reward_metrics([1.0, 0.0], ["a", "a"], n_samples_per_prompt=2, include=[True, False])
    assert metrics["avg_raw_reward"] == 1.0
    assert metrics["variance_per_prompt"] == 0.0


def test_nothing_included_gives_no_metrics():
    assert compute_reward_metrics([0.0], ["a"], 1, include=[False]) == {}


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
