"""The MCP reward, case by case, with hand-computed expected values (weights: format 0.1, tool calls 0.2,
parameters 0.2, answer 0.5; limit cap 0.25)."""

from __future__ import annotations

import json

import pytest

from skyrl_integrations.mcp.scoring import (
    CallRecord,
    EpisodeRecord,
    GroundTruth,
    RewardWeights,
    answer_matches,
    score_episode,
)

PRICE = {
    "task_id": "market-0001",
    "complexity": "single",
    "max_turns": 3,
    "success": {"must_call_tool": True, "expected_answer": "187.23", "answer_match": "numeric"},
    "tool_sequence": [
        {"step": 1, "server": "market", "tool": "get_stock_price", "params": {"ticker": "AAPL", "date": "2024-03-15"}}
    ],
    "limits": {"max_servers": 1, "max_tools": 2},
}


def truth(base=PRICE, **changes) -> GroundTruth:
    value = json.loads(json.dumps(base))
    for key, change in changes.items():
        value[key] = change
    return GroundTruth.parse(value)


def price_call(ticker="AAPL", date="2024-03-15", server="market", error_kind=None) -> CallRecord:
    return CallRecord(server, "get_stock_price", {"ticker": ticker, "date": date}, error_kind)


def reward(gt: GroundTruth, calls=(), answer=None) -> float:
    return score_episode(gt, EpisodeRecord(tuple(calls), answer)).reward


# ------------------------------------------------------------------------------------------- the grades


def test_right_call_and_right_answer_earn_one():
    assert reward(truth(), [price_call()], "AAPL closed at $187.23.") == 1.0


def test_worked_example_wrong_parameters_and_wrong_answer_earn_format_and_tool():
    assert reward(truth(), [price_call(ticker="MSFT")], "It closed at 410.5") == pytest.approx(0.1 + 0.2)


def test_right_call_without_an_answer_earns_everything_but_the_answer():
    assert reward(truth(), [price_call()], None) == pytest.approx(0.5)


def test_a_well_formed_call_to_another_tool_earns_only_format():
    other = CallRecord("market", "get_company_profile", {"ticker": "AAPL"})
    assert reward(truth(), [other], "no idea") == pytest.approx(0.1)


def test_without_format_credit_a_call_to_another_tool_earns_nothing_and_the_rest_is_renormalised():
    no_format = RewardWeights(format=0.0)
    other = CallRecord("market", "get_company_profile", {"ticker": "AAPL"})
    assert score_episode(truth(), EpisodeRecord((other,), "no idea"), no_format).reward == 0.0
    wrong_ticker = EpisodeRecord((price_call(ticker="MSFT"),), "It closed at 410.5")
    assert score_episode(truth(), wrong_ticker, no_format).reward == pytest.approx(0.2 / 0.9)
    right = EpisodeRecord((price_call(),), "187.23")
    assert score_episode(truth(), right, no_format).reward == pytest.approx(1.0)


def test_an_episode_whose_only_component_weighs_nothing_scores_zero():
    only_format = truth(success={"must_call_tool": True}, tool_sequence=[])
    episode = EpisodeRecord((price_call(),), None)
    assert score_episode(only_format, episode).reward == 1.0
    assert score_episode(only_format, episode, RewardWeights(format=0.0)).reward == 0.0


def test_the_right_answer_without_any_call_earns_nothing_when_a_call_is_required():
    assert reward(truth(), [], "187.23") == 0.0


def test_the_right_answer_without_a_call_counts_when_no_call_is_required():
    gt = truth(success={"must_call_tool": False, "expected_answer": "187.23"})
    assert reward(gt, [], "187.23") == pytest.approx(0.5)


def test_a_call_that_returned_a_tool_error_still_counts_as_made():
    assert reward(truth(), [price_call(error_kind="tool_error")], None) == pytest.approx(0.5)


def test_refused_calls_do_not_count():
    assert reward(truth(), [price_call(error_kind="not_allowed")], "187.23") == 0.0


def test_parameters_compare_strings_case_insensitively():
    assert reward(truth(), [price_call(ticker=" aapl ")], "187.23") == 1.0


def test_a_corrected_second_attempt_gets_full_parameter_credit():
    assert reward(truth(), [price_call(ticker="APPL"), price_call()], "187.23") == 1.0


def test_a_step_naming_a_server_only_matches_calls_to_that_server():
    assert reward(truth(), [price_call(server="search")], None) == pytest.approx(0.1)


# ------------------------------------------------------------------------------------- multi-step tasks

TWO_STEPS = {
    "success": {"must_call_tool": True, "expected_answer": "Apple", "answer_match": "contains"},
    "tool_sequence": [
        {"step": 1, "server": "search", "tool": "search", "params": {"query": "largest company"}},
        {"step": 2, "server": "market", "tool": "get_company_profile", "params": {"ticker": "AAPL"}},
    ],
}
SEARCH = CallRecord("search", "search", {"query": "largest company"})
PROFILE = CallRecord("market", "get_company_profile", {"ticker": "AAPL"})


def test_half_of_the_steps_earn_half_of_tool_and_parameter_credit():
    # format 0.1 + tools 0.2 * 1/2 + params 0.2 * 1/2, answer wrong
    assert reward(GroundTruth.parse(TWO_STEPS), [SEARCH], "Microsoft") == pytest.approx(0.3)


def test_steps_must_be_matched_in_order():
    # PROFILE then SEARCH: only one of the two steps can be aligned in order
    assert reward(GroundTruth.parse(TWO_STEPS), [PROFILE, SEARCH], None) == pytest.approx(0.1 + 0.1 + 0.1)


BY_NAME = {
    **PRICE,
    "tool_sequence": [
        {"step": 1, "server": "market", "tool": "search_tickers", "result_contains": "AAPL"},
        {"step": 2, "server": "market", "tool": "get_stock_price", "params": {"ticker": "AAPL", "date": "2024-03-15"}},
    ],
}


def search_call(result: str, error_kind=None) -> CallRecord:
    return CallRecord("market", "search_tickers", {"query": "Apple"}, error_kind, result)


def test_a_search_whose_result_holds_what_the_next_step_needs_earns_its_step():
    # format 0.1 + tools 0.2 * 1/2 + params 0.2 * 1/2 (the step has no params), answer wrong
    found = search_call('{"results":[{"ticker":"aapl","name":"Apple Inc."}]}')
    assert reward(GroundTruth.parse(BY_NAME), [found], "1") == pytest.approx(0.3)


@pytest.mark.parametrize(
    "call",
    [
        search_call('{"results":[{"ticker":"MSFT","name":"Microsoft Corporation"}]}'),
        search_call('{"results":[]}'),
        search_call("Unknown ticker AAPL", error_kind="tool_error"),
    ],
)
def test_a_search_that_did_not_find_it_earns_nothing_for_its_step(call):
    assert reward(GroundTruth.parse(BY_NAME), [call], "1") == pytest.approx(0.1)


def test_a_task_without_an_expected_answer_is_scored_on_its_calls_alone():
    gt = truth(TWO_STEPS, success={"must_call_tool": True})
    # (0.1 + 0.2 + 0.2 * 1/2) / 0.5
    assert reward(gt, [SEARCH, CallRecord("market", "get_company_profile", {"ticker": "MSFT"})]) == pytest.approx(0.8)
    score = score_episode(gt, EpisodeRecord((SEARCH, PROFILE)))
    assert (score.reward, score.success) == (1.0, True)


# ----------------------------------------------------------------------------------------------- limits


def test_using_more_tools_than_allowed_caps_the_reward():
    extra = [CallRecord("market", f"tool_{i}", {}) for i in range(2)]
    score = score_episode(truth(), EpisodeRecord((price_call(), *extra), "187.23"))
    assert (score.over_limits, score.reward) == (True, 0.25)


def test_using_more_servers_than_allowed_caps_the_reward():
    score = score_episode(truth(), EpisodeRecord((price_call(), CallRecord("search", "search", {})), "187.23"))
    assert (score.over_limits, score.reward) == (True, 0.25)


def test_the_cap_does_not_raise_a_lower_reward():
    other = [CallRecord("search", "search", {})]
    assert reward(truth(), other, None) == pytest.approx(0.1)


# ---------------------------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    ("answer", "matched"),
    [("187.23", True), ("It was $187.2 on 2024-03-15", True), ("about 187", False), ("1,87.23", False)],
)
def test_numeric_answers_match_within_the_relative_tolerance(answer, matched):
    assert answer_matches(truth(), answer) is matched


@pytest.mark.parametrize(
    ("answer", "matched"),
    [
        ('{"date":"2024-03-15","open":185.1,"high":188.0,"close":187.23,"volume":5123456}', False),
        ("187.23 or maybe 185.1", False),
        ("It opened at 185.1 and closed at 187.23.", True),
        ("On 2024-03-15 AAPL closed at 187.23", True),
    ],
)
def test_a_numeric_answer_is_the_last_number_stated_so_echoing_a_tool_result_is_not_right(answer, matched):
    assert answer_matches(truth(), answer) is matched


def test_numbers_with_thousands_separators_are_read():
    gt = truth(success={"expected_answer": "1234567.5", "answer_match": "numeric"})
    assert answer_matches(gt, "Revenue: 1,234,567.5 USD")


def test_a_task_tolerance_overrides_the_default():
    gt = truth(success={"expected_answer": "100", "answer_match": "numeric", "tolerance": 0.05})
    assert (answer_matches(gt, "104"), answer_matches(gt, "106")) == (True, False)


@pytest.mark.parametrize(("answer", "matched"), [("  Paris. ", True), ("PARIS", True), ("It is Paris", False)])
def test_exact_answers_match_after_normalising_case_space_and_final_punctuation(answer, matched):
    gt = truth(success={"expected_answer": "Paris", "answer_match": "exact"})
    assert answer_matches(gt, answer) is matched


@pytest.mark.parametrize(("answer", "matched"), [("He has 4 apples.", True), ("He has 14 apples.", False)])
def test_contains_matches_whole_words_only(answer, matched):
    gt = truth(success={"expected_answer": "4", "answer_match": "contains"})
    assert answer_matches(gt, answer) is matched


# --------------------------------------------------------------------------------------------- parsing


def test_ground_truth_may_be_json_text():
    assert GroundTruth.parse(json.dumps(PRICE)) == truth()


def test_answer_match_defaults_to_numeric_for_numbers_and_contains_otherwise():
    numeric = truth(success={"expected_answer": "3.5"})
    text = truth(success={"expected_answer": "Cupertino"})
    assert (numeric.answer_match, text.answer_match) == ("numeric", "contains")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"success": {"expected_answer": "x", "answer_match": "fuzzy"}}, r"success.answer_match: expected one of"),
        ({"success": {"expected_answer": "ten", "answer_match": "numeric"}}, r"expected_answer: 'ten' is not a num"),
        ({"max_turns": 0}, r"ground_truth.max_turns: expected a positive integer"),
        ({"complexity": "hard"}, r"complexity: expected one of"),
        ({"tool_sequence": [{"step": 1, "params": {}}]}, r"tool_sequence\[0\].tool: expected a tool name"),
        ({"limits": {"max_tools": -1}}, r"limits.max_tools: expected a positive integer"),
        ({"success": {}, "tool_sequence": []}, r"nothing to score"),
        ({"tool_sequence": [{"tool": "search_tickers", "result_contains": " "}]}, r"\[0\].result_contains: expected a"),
    ],
)
def test_bad_ground_truth_is_rejected_naming_the_key(change, message):
    with pytest.raises(ValueError, match=message):
        truth(**change)


def test_ground_truth_text_that_is_not_json_is_rejected():
    with pytest.raises(ValueError, match="reward_spec.ground_truth: not valid JSON"):
        GroundTruth.parse("{task_id: 1")


def test_steps_are_ordered_by_their_step_number():
    gt = truth(TWO_STEPS, tool_sequence=list(reversed(TWO_STEPS["tool_sequence"])))
    assert [s.tool for s in gt.tool_sequence] == ["search", "get_company_profile"]
