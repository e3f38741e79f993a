"""Failure categories on hand-made trajectories (rules in `skyrl_integrations.analysis.categories`)."""

from __future__ import annotations

import pytest

from skyrl_gym import InfraFailureReason
from skyrl_integrations.analysis import CATEGORIES, classify, summarize
from skyrl_integrations.analysis.categories import INFRA_STOP_REASONS
from skyrl_integrations.analysis.dumps import to_trajectory

CALL = ("assistant", '{"name": "get_quote", "arguments": {"ticker": "AAPL"}}')


def categories(row) -> list[str]:
    return [finding.category for finding in classify(to_trajectory(row, "t.jsonl:1"))]


@pytest.mark.parametrize(
    "observation",
    [
        "Error 401: Unauthorized",
        "HTTP 403 Forbidden",
        "status code: 403",
        "permission denied for repository acme/api",
        "Invalid API key provided",
        "Authentication failed: token expired",
    ],
)
def test_authorization_errors(make_row, observation):
    assert categories(make_row(0.0, CALL, ("tool", observation), ("assistant", "I could not."))) == [
        "authorization_error"
    ]


@pytest.mark.parametrize(
    "observation",
    [
        "Invalid arguments for get_quote",
        "'ticker' is a required property",
        "TypeError: get_quote() missing 1 required positional argument: 'ticker'",
        "1 validation error for GetQuoteInput",
        "get_quote() got an unexpected keyword argument 'symbol'",
        "Could not parse the tool call as JSON",
        "Unknown tool: get_weather",
        "Tool get_weather not found",
    ],
)
def test_tool_argument_errors(make_row, observation):
    assert categories(make_row(0.0, CALL, ("tool", observation), ("assistant", "I could not."))) == [
        "tool_argument_error"
    ]


@pytest.mark.parametrize(
    "observation",
    [
        "404 Not Found",
        "Unknown ticker: ZZZZ",
        "Unknown crypto symbol: search_tickers finds crypto symbols by coin name",
        "Order #123 does not exist",
        "No such file: notes.txt",
    ],
)
def test_resource_not_found(make_row, observation):
    assert categories(make_row(0.0, CALL, ("tool", observation), ("assistant", "I could not."))) == [
        "resource_not_found"
    ]


def test_parse_failures_recorded_by_the_env_are_tool_argument_errors(make_row):
    assert categories(make_row(0.0, ("assistant", "get quote AAPL"), parse_failures={"json": 2})) == [
        "tool_argument_error"
    ]


def test_stop_reason_length_is_a_context_overflow(make_row):
    assert categories(make_row(0.0, CALL, ("tool", "189.5"), ("assistant", "The price"), stop_reason="length")) == [
        "context_overflow"
    ]


def test_a_context_limit_error_from_the_env_is_a_context_overflow(make_row):
    observation = ("user", "Error: this request exceeds the maximum context length of 4096 tokens")
    assert categories(make_row(0.0, CALL, observation, ("assistant", "Hmm."))) == ["context_overflow"]


@pytest.mark.parametrize(
    "claim",
    [
        "I have successfully booked the flight.",
        "The task is now complete.",
        "All done!",
        "I've updated the ticket. <done>",
        "The answer is 12.\n#### 12",
    ],
)
def test_claiming_completion_with_score_zero_is_a_false_completion(make_row, claim):
    assert categories(make_row(0.0, CALL, ("tool", "ok"), ("assistant", claim))) == ["false_completion"]


def test_claiming_completion_with_a_positive_score_is_no_failure(make_row):
    assert categories(make_row(1.0, CALL, ("tool", "ok"), ("assistant", "I have successfully booked it."))) == []


def test_a_truncated_claim_is_a_context_overflow_not_a_false_completion(make_row):
    row = make_row(0.0, ("assistant", "The task is complete and"), stop_reason="length")
    assert categories(row) == ["context_overflow"]


def test_a_failed_answer_without_a_claim_is_uncategorised(make_row):
    assert categories(make_row(0.0, CALL, ("tool", "189.5"), ("assistant", "Let me think about it."))) == []


@pytest.mark.parametrize(
    "stop_reason", ["env_init_failed", "env_step_failed", "timeout", "tool_server_failed", "user_simulator_failed"]
)
def test_infrastructure_failures_are_categorised_by_stop_reason(make_row, stop_reason):
    assert categories(make_row(0.0, CALL, stop_reason=stop_reason)) == [stop_reason]


def test_an_infrastructure_failures_snippet_is_its_dumped_error(make_row):
    failure = {"reason": "env_step_failed", "error": "ConnectionError: tool server crashed"}
    row = make_row(0.0, CALL, stop_reason="env_step_failed", infra_failure=failure)
    (finding,) = classify(to_trajectory(row, "t.jsonl:1"))
    assert (finding.category, finding.snippet) == (
        "env_step_failed",
        "stop_reason=env_step_failed: ConnectionError: tool server crashed",
    )


def test_the_infrastructure_categories_are_the_infra_failure_reasons():
    assert set(INFRA_STOP_REASONS) == {reason.value for reason in InfraFailureReason}


def test_tool_errors_no_rule_explains_are_other_tool_errors(make_row):
    row = make_row(0.0, CALL, ("tool", "Something odd happened"), ("assistant", "Hmm."), env_metrics={"tool_errors": 1})
    assert categories(row) == ["other_tool_error"]


def test_tool_errors_a_rule_explains_are_not_counted_again(make_row):
    row = make_row(0.0, CALL, ("tool", "404 Not Found"), ("assistant", "Hmm."), env_metrics={"tool_errors": 1})
    assert categories(row) == ["resource_not_found"]


def test_an_observation_gets_only_its_first_matching_category(make_row):
    observation = ("tool", "401 Unauthorized: user not found in this workspace")
    assert categories(make_row(0.0, CALL, observation, ("assistant", "Hmm."))) == ["authorization_error"]


@pytest.mark.parametrize(
    "observation",
    [
        "Total: 403 dollars for 2 nights",
        "AAPL closed at 189.5 on 2024-03-15",
        "That is not correct yet. Please think through the problem again step by step, explain your reasoning, "
        "and end your response with the final answer in the form #### ANSWER.",
    ],
)
def test_ordinary_observations_are_no_failures(make_row, observation):
    assert categories(make_row(0.0, CALL, ("tool", observation), ("assistant", "Hmm."))) == []


def test_assistant_text_is_not_read_as_an_observation(make_row):
    assert categories(make_row(0.0, ("assistant", "Maybe the file was not found?"), ("user", "Try again."))) == []


def test_a_snippet_shows_the_matching_text_with_context(make_row):
    observation = "x" * 100 + " Error 404: order 77 not found " + "y" * 200
    (finding,) = classify(to_trajectory(make_row(0.0, CALL, ("tool", observation)), "t.jsonl:1"))
    assert finding.snippet == "…" + "x" * 59 + " Error 404: order 77 not found " + "y" * 79 + "…"


def test_counts_over_a_hand_made_batch(make_row):
    """Eleven trajectories; a trajectory counts once per category, however many of its observations match."""
    rows = [
        make_row(0.0, CALL, ("tool", "Error 401: Unauthorized"), CALL, ("tool", "HTTP 403 Forbidden")),
        make_row(0.0, CALL, ("tool", "Invalid arguments"), CALL, ("tool", "404 Not Found"), ("assistant", "Hmm.")),
        make_row(0.0, CALL, ("tool", "Unknown ticker: ZZZZ"), ("assistant", "I have completed the task.")),
        make_row(0.0, ("assistant", "I have completed the task.")),
        make_row(1.0, ("assistant", "I have completed the task.")),
        make_row(0.0, ("assistant", "Let me"), stop_reason="length"),
        make_row(0.0, ("assistant", "call"), parse_failures={"json": 1, "tag": 1}),
        make_row(0.0, stop_reason="env_init_failed"),
        make_row(0.0, CALL, stop_reason="engine_failed"),
        make_row(0.0, CALL, stop_reason="timeout"),
        make_row(0.0, CALL, ("tool", "189.5"), ("assistant", "Hmm.")),
    ]
    summary = summarize([to_trajectory(row, f"t.jsonl:{i + 1}") for i, row in enumerate(rows)], max_examples=1)
    counts = {category: entry["count"] for category, entry in summary["failure_categories"].items()}
    assert counts == {
        "tool_argument_error": 2,
        "authorization_error": 1,
        "resource_not_found": 2,
        "false_completion": 2,
        "context_overflow": 1,
        "other_tool_error": 0,
        "engine_failed": 1,
        "env_init_failed": 1,
        "env_step_failed": 0,
        "timeout": 1,
        "tool_server_failed": 0,
        "user_simulator_failed": 0,
    }
    assert list(counts) == list(CATEGORIES)
    assert summary["failure_categories"]["resource_not_found"]["rate"] == 2 / 11
    assert summary["failure_categories"]["authorization_error"]["examples"] == [
        {"location": "t.jsonl:1", "snippet": "Error 401: Unauthorized"}
    ]
