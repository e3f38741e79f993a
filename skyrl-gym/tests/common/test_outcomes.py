"""Whether a trajectory solved its task: the env's `success` metric when it reports one, else final reward > 0.
(Return, outcome and pass^k have their tests with the trainer's metrics, skyrl-train/tests/metrics.)"""

import pytest

from skyrl_gym.common.outcomes import trajectory_solved


@pytest.mark.parametrize(("reward", "solved"), [(1.0, True), (0.0, False), (-0.5, False), ([0.0, 0.0, 0.3], True)])
def test_without_a_success_metric_a_positive_final_reward_solves(reward, solved):
    assert trajectory_solved(reward) is solved


def test_a_partly_graded_reward_with_success_false_is_not_solved():
    assert trajectory_solved(0.3, {"success": False, "tool_calls": 1}) is False


def test_success_true_solves_even_with_zero_reward():
    assert trajectory_solved(0.0, {"success": 1}) is True


def test_a_success_metric_of_none_leaves_the_final_reward_to_decide():
    assert trajectory_solved([1.0, 0.0], {"success": None}) is False
