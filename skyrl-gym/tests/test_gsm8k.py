import pytest

import skyrl_gym
from skyrl_gym.envs.gsm8k.scoring import compute_score, extract_solution


def make_env(ground_truth="42"):
    return skyrl_gym.make("gsm8k", extras={"reward_spec": {"method": "rule", "ground_truth": ground_truth}})


def test_extracts_number_after_marker():
    assert extract_solution("6 * 7 = 42\n#### 42") == "42"


def test_takes_the_last_marker():
    assert extract_solution("#### 7 was a guess.\nActually:\n#### 42") == "42"


def test_removes_thousands_commas():
    assert extract_solution("#### 1,234,567") == "1234567"


def test_removes_dollar_sign():
    assert extract_solution("#### $18") == "18"


def test_keeps_negative_sign():
    assert extract_solution("#### -5") == "-5"
    assert extract_solution("#### -$5") == "-5"


def test_sentence_period_is_not_part_of_the_number():
    assert extract_solution("#### 42.") == "42"


def test_keeps_decimal_digits():
    assert extract_solution("#### 2.50") == "2.50"


def test_no_marker_gives_none():
    assert extract_solution("The answer is 42.") is None
    assert extract_solution("#### forty-two") is None


def test_score_correct_is_one():
    assert compute_score("so #### 1,000", "1000") == 1.0


def test_score_wrong_uses_format_score():
    assert compute_score("#### 41", "42") == 0.0
    assert compute_score("#### 41", "42", format_score=0.1) == 0.1


def test_score_unformatted_is_zero_even_with_format_score():
    assert compute_score("42", "42", format_score=0.1) == 0.0


def test_score_negative_answer():
    assert compute_score("#### -5", "-5") == 1.0


def test_env_correct_answer_rewards_one_and_ends():
    env = make_env("42")
    prompt = [{"role": "user", "content": "6 * 7?"}]
    assert env.init(prompt) == (prompt, {})
    out = env.step("6 * 7 = 42\n#### 42")
    assert out["reward"] == 1.0
    assert out["done"] is True
    assert out["observations"] == []
    assert out["metadata"]["parsed_answer"] == "42"


def test_env_wrong_answer_rewards_zero():
    out = make_env("42").step("#### 41")
    assert out["reward"] == 0.0
    assert out["done"] is True
    assert out["metadata"]["parsed_answer"] == "41"


def test_env_requires_ground_truth():
    with pytest.raises(KeyError, match=r"\['reward_spec'\]\['ground_truth'\]"):
        skyrl_gym.make("gsm8k", extras={"reward_spec": {"method": "rule"}})


def test_env_does_not_mutate_extras():
    extras = {"reward_spec": {"ground_truth": "3"}}
    make_env().step("#### 3")
    skyrl_gym.make("gsm8k", extras=extras).step("#### 3")
    assert extras == {"reward_spec": {"ground_truth": "3"}}
