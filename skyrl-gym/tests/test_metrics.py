"""Per-environment aggregation of episode metrics."""

import pytest

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.metrics import aggregate_for_environment, default_aggregate_metrics


def test_default_aggregation_averages_numbers_counts_bools_and_drops_the_rest():
    metrics = [
        {"turns": 2, "solved": True, "note": "a"},
        {"turns": 4, "solved": False},
        {"turns": 3, "solved": True, "tool_calls": 5},
    ]
    assert default_aggregate_metrics(metrics) == {"turns": 3.0, "solved": pytest.approx(2 / 3), "tool_calls": 5.0}


def test_default_aggregation_of_nothing_is_empty():
    assert default_aggregate_metrics([]) == {}


class SumEnv(BaseTextEnv):
    def step(self, action):
        return {"observations": [], "reward": 0.0, "done": True}

    @staticmethod
    def aggregate_metrics(metrics):
        return {"total_calls": sum(m["calls"] for m in metrics)}


def test_aggregate_for_environment_uses_the_registered_class(clean_registry):
    skyrl_gym.register("sum_env", entry_point=SumEnv)
    assert aggregate_for_environment("sum_env", [{"calls": 2}, {"calls": 5}]) == {"total_calls": 7}


def test_aggregate_for_environment_defaults_for_base_text_envs(clean_registry):
    class Plain(BaseTextEnv):
        def step(self, action):
            return {"observations": [], "reward": 0.0, "done": True}

    skyrl_gym.register("plain", entry_point=Plain)
    assert aggregate_for_environment("plain", [{"x": 1}, {"x": 3}]) == {"x": 2.0}
