import pytest

import skyrl_gym
from skyrl_gym.envs.gsm8k_multi_turn.env import FINAL_NUDGE, NUDGE
from skyrl_gym.metrics import aggregate_for_environment

FORMAT_REWARD_3_TURNS = 0.2 / 3  # 0.0666...


def make_env(max_turns=3, **extras):
    return skyrl_gym.make(
        "gsm8k_multi_turn", extras={"reward_spec": {"ground_truth": "12"}, "max_turns": max_turns, **extras}
    )


def test_correct_first_turn_rewards_one_and_ends():
    out = make_env().step("#### 12")
    assert out["reward"] == 1.0
    assert out["done"] is True
    assert out["observations"] == []


def test_formatted_wrong_answer_gets_format_reward_and_nudge():
    out = make_env().step("#### 5")
    assert out["reward"] == pytest.approx(0.06666666666666667)
    assert out["reward"] == pytest.approx(FORMAT_REWARD_3_TURNS)
    assert out["done"] is False
    assert out["observations"] == [{"role": "user", "content": NUDGE}]
    assert "#### ANSWER" in NUDGE


def test_unformatted_answer_gets_zero():
    out = make_env().step("twelve")
    assert out["reward"] == 0.0
    assert out["done"] is False


def test_turn_before_the_last_asks_for_the_final_answer_only():
    env = make_env()
    env.step("#### 5")
    out = env.step("no idea")
    assert out["observations"] == [{"role": "user", "content": FINAL_NUDGE}]
    assert "final answer" in FINAL_NUDGE


def test_episode_ends_at_max_turns_with_per_turn_rewards():
    env = make_env()
    rewards = [env.step(a)["reward"] for a in ("#### 5", "nothing", "#### 6")]
    assert rewards == [pytest.approx(FORMAT_REWARD_3_TURNS), 0.0, pytest.approx(FORMAT_REWARD_3_TURNS)]
    assert env.turns == 3


def test_last_turn_is_done_without_observation():
    env = make_env()
    env.step("#### 5")
    env.step("#### 5")
    out = env.step("#### 5")
    assert out["done"] is True
    assert out["observations"] == []


def test_correct_on_second_turn_ends_early():
    env = make_env()
    env.step("#### 5")
    out = env.step("#### 12")
    assert (out["reward"], out["done"]) == (1.0, True)
    assert env.get_metrics() == {"steps": 2}


def test_max_turns_from_extra_info():
    env = skyrl_gym.make(
        "gsm8k_multi_turn", extras={"reward_spec": {"ground_truth": "1"}, "extra_info": {"max_turns": 2}}
    )
    assert env.max_turns == 2


def test_max_turns_from_extras_wins_over_extra_info():
    assert make_env(max_turns=4, extra_info={"max_turns": 2}).max_turns == 4


def test_max_turns_defaults_to_five():
    env = skyrl_gym.make("gsm8k_multi_turn", extras={"reward_spec": {"ground_truth": "1"}, "max_turns": None})
    assert env.max_turns == 5


def test_metrics_aggregate_to_avg_steps():
    assert aggregate_for_environment("gsm8k_multi_turn", [{"steps": 1}, {"steps": 3}, {"steps": 2}]) == {
        "avg_steps": 2.0
    }


def test_aggregate_of_no_episodes_is_empty():
    assert aggregate_for_environment("gsm8k_multi_turn", []) == {}
