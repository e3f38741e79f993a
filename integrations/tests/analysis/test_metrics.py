"""The numbers of one step: pass@k (unbiased), any success, mean score, turns, tool calls, stop reasons."""

from __future__ import annotations

import pytest

from skyrl_integrations.analysis import pass_at_k, summarize, summarize_step
from skyrl_integrations.analysis.dumps import to_trajectory


def trajectories(rows):
    return [to_trajectory(row, f"t.jsonl:{i + 1}") for i, row in enumerate(rows)]


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [(3, 1, 1, 1 / 3), (3, 1, 2, 2 / 3), (3, 1, 3, 1.0), (3, 0, 2, 0.0), (4, 2, 2, 5 / 6), (5, 5, 1, 1.0)],
)
def test_pass_at_k_is_the_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_k_larger_than_n():
    with pytest.raises(ValueError, match="n=2 c=1 k=3"):
        pass_at_k(2, 1, 3)


@pytest.fixture
def three_prompts(make_row):
    """Prompt a: 1 of 3 succeed, b: 0 of 3, c: 2 of 3."""
    scores = {"a": [1.0, 0.0, 0.0], "b": [0.0, 0.0, 0.0], "c": [1.0, 1.0, 0.0]}
    return trajectories(
        make_row(score, instance=prompt, repetition=i)
        for prompt, values in scores.items()
        for i, score in enumerate(values)
    )


def test_pass_at_k_is_averaged_over_prompts_for_every_k_up_to_n(three_prompts):
    assert summarize(three_prompts)["pass_at_k"] == pytest.approx({"1": 1 / 3, "2": 5 / 9, "3": 2 / 3})


def test_pass_hat_k_is_averaged_over_prompts_for_every_k_up_to_n(three_prompts):
    # a: C(1,k)/C(3,k) = 1/3, 0, 0; b: 0; c: C(2,k)/C(3,k) = 2/3, 1/3, 0
    assert summarize(three_prompts)["pass_hat_k"] == pytest.approx({"1": 1 / 3, "2": 1 / 9, "3": 0.0})


def test_any_success_is_the_fraction_of_prompts_with_a_success(three_prompts):
    assert summarize(three_prompts)["any_success"] == pytest.approx(2 / 3)


def test_mean_score_is_the_mean_return(three_prompts):
    assert summarize(three_prompts)["mean_score"] == pytest.approx(3 / 9)


def test_per_token_scores_are_summed_before_the_threshold(make_row):
    rows = [make_row([0.0, 0.3], instance="a"), make_row([0.0, 0.0], instance="b"), make_row([0.5, 0.5], instance="c")]
    assert summarize(trajectories(rows))["any_success"] == pytest.approx(2 / 3)
    assert summarize(trajectories(rows), success_threshold=0.5)["any_success"] == pytest.approx(1 / 3)


def test_infrastructure_failures_count_as_failed_zero_score_samples(make_row):
    rows = [
        make_row(1.0, repetition=0),
        make_row(0.0, repetition=1),
        make_row(1.0, repetition=2, stop_reason="env_init_failed"),  # a crash never counts as a success
    ]
    summary = summarize(trajectories(rows))
    assert (summary["trajectories"], summary["scored_trajectories"]) == (3, 2)
    # n=3 samples, c=1 success: pass@1 = 1/3, pass@2 = 1 - C(2,2)/C(3,2) = 2/3, pass@3 = 1
    assert summary["pass_at_k"] == pytest.approx({"1": 1 / 3, "2": 2 / 3, "3": 1.0})
    assert summary["mean_score"] == pytest.approx(1 / 3)
    assert summary["infra_failure_rate"] == pytest.approx(1 / 3)
    assert summary["stop_reasons"] == {"stop": 2, "env_init_failed": 1}


def test_k_goes_up_to_the_smallest_number_of_samples_of_a_prompt(make_row):
    rows = [make_row(1.0, instance="a", repetition=i) for i in range(3)] + [make_row(0.0, instance="b")]
    assert list(summarize(trajectories(rows))["pass_at_k"]) == ["1"]


def test_samples_without_trajectory_ids_are_grouped_by_prompt_text(make_row):
    rows = [make_row(1.0, instance="a"), make_row(0.0, instance="a"), make_row(0.0, instance="b")]
    for row in rows:
        del row["trajectory_id"]
    summary = summarize(trajectories(rows))
    assert summary["prompts"] == 2
    assert summary["pass_at_k"] == pytest.approx({"1": 0.25})


def test_turns_and_tool_calls_are_averaged_over_the_trajectories_that_record_them(make_row):
    two_turns = [("assistant", "call"), ("tool", "ok"), ("assistant", "Done.")]
    rows = [make_row(0.0, *two_turns, tool_calls=1), make_row(0.0, tool_calls=3, repetition=1), make_row(0.0)]
    summary = summarize(trajectories(rows))
    assert (summary["avg_turns"], summary["turns_known"], summary["turns_histogram"]) == (4 / 3, 3, {"1": 2, "2": 1})
    assert (summary["avg_tool_calls"], summary["tool_calls_known"]) == (2.0, 2)


def test_unrecorded_numbers_are_none_not_zero(make_row):
    row = make_row(1.0)
    for key in ("messages", "num_prompt_messages", "num_turns"):
        del row[key]
    row["input_prompt"] = "Q: do the task\nA:"  # no known chat template: turns cannot be counted
    summary = summarize(trajectories([row]))
    assert (summary["avg_turns"], summary["avg_tool_calls"]) == (None, None)


def test_a_step_is_summarised_per_environment_then_overall(make_row):
    rows = [make_row(1.0, data_source="b_env"), make_row(0.0, data_source="a_env"), make_row(0.0, data_source=None)]
    step = summarize_step(trajectories(rows), group_by="data_source")
    assert list(step) == ["a_env", "b_env", "unknown", "overall"]
    assert [step[name]["trajectories"] for name in step] == [1, 1, 1, 3]


def test_environments_can_be_env_classes(make_row):
    rows = [make_row(1.0, env_class="gsm8k"), make_row(0.0, env_class="mcp_tool")]
    assert list(summarize_step(trajectories(rows), group_by="env_class")) == ["gsm8k", "mcp_tool", "overall"]


def test_success_is_the_envs_success_metric_when_dumped(make_row):
    # Graded rewards: both trajectories scored 0.3, but only the second answered correctly by the env's rule.
    rows = trajectories(
        [
            make_row(0.3, instance="a", env_metrics={"success": 0}),
            make_row(0.3, instance="b", env_metrics={"success": 1}),
        ]
    )
    assert summarize(rows)["any_success"] == 0.5
    assert summarize(rows, success_threshold=0.2)["any_success"] == 1.0


def test_success_without_an_env_metric_is_a_positive_final_reward(make_row):
    rows = trajectories([make_row([0.5, 0.0], instance="a"), make_row([0.0, 0.5], instance="b")])
    assert summarize(rows)["any_success"] == 0.5
