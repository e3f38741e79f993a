"""The rule baseline: question-agnostic rules run through the env against the real market server."""

from __future__ import annotations

import json

import pytest

from skyrl_integrations.analysis.rule_baseline import (
    ANSWERS,
    RULES,
    BaselineError,
    Facts,
    Rule,
    _answer_text,
    main,
    run_sequence,
    score_rules,
)
from skyrl_integrations.datasets.schema import TaskRow, ToolStep
from skyrl_integrations.mcp.client import close_all_sessions
from skyrl_integrations.mcp.servers.market.offline import OfflineMarket

MARKET_TOOLS = [
    "get_stock_price",
    "get_price_history",
    "get_crypto_price",
    "get_company_profile",
    "get_financials",
    "search_tickers",
]


@pytest.fixture(autouse=True, scope="module")
def fresh_sessions():
    close_all_sessions()
    yield
    close_all_sessions()


def _row(question: str, steps: list[ToolStep], answer: str, entity_text: str, split: str = "unseen") -> dict:
    task = TaskRow(
        task_id=f"market-{abs(hash(question))}",
        system_prompt="Use the tools.",
        user_prompt=question,
        tool_sequence=steps,
        expected_answer=answer,
        answer_match="numeric",
        tolerance=1e-4,
        tools=MARKET_TOOLS,
        max_turns=len(steps) + 2,
        split="validation",
        data_source="mcp/market/price_field",
        extra={"template": "price_field", "entity_text": entity_text, "entity_split": split},
    )
    return task.to_row()


AAPL_LOW = _row(
    "What was the lowest price of AAPL on 2024-03-15?",
    [ToolStep(1, "market", "get_stock_price", {"ticker": "AAPL", "date": "2024-03-15"})],
    "171.84",  # the offline server's AAPL bar of that day: open 172.08, high 177.78, low 171.84, close 176.78
    "AAPL",
)


def test_facts_are_the_entity_as_written_and_the_questions_first_date_and_period():
    row = _row(
        "What was KO's EPS in 2024-Q3 (asked on 2024-11-02)?", [ToolStep(1, "market", "get_financials")], "1", "KO"
    )
    assert Facts.of(row, "row 0") == Facts("KO", "2024-11-02", "2024-Q3")


def test_a_row_without_the_entity_as_written_is_refused_naming_it():
    row = AAPL_LOW | {"extra_info": {**AAPL_LOW["extra_info"], "entity_text": None}}
    with pytest.raises(BaselineError, match="row 3: extra_info.entity_text is missing"):
        Facts.of(row, "row 3")


def test_only_the_answer_of_the_asked_field_succeeds():
    outcomes = run_sequence(("get_stock_price",), AAPL_LOW)
    assert [answer for answer in ANSWERS if outcomes[answer]] == ["low"]


def test_an_error_naming_search_tickers_is_followed_by_a_search_and_a_retry_with_the_ticker_found():
    close = OfflineMarket().stock_price("TSLA", "2024-03-15")["close"]
    row = _row(
        "What was the closing price of Tesla, Inc. on 2024-03-15?",
        [
            ToolStep(1, "market", "search_tickers"),
            ToolStep(2, "market", "get_stock_price", {"ticker": "TSLA", "date": "2024-03-15"}),
        ],
        str(close),
        "Tesla, Inc.",
    )
    outcomes = run_sequence(("get_stock_price",), row)
    assert (outcomes["close"], outcomes["open"]) == (True, False)


def test_a_tool_that_cannot_answer_fails_every_answer_rule():
    assert not any(run_sequence(("get_company_profile",), AAPL_LOW).values())


def test_the_summary_gives_the_best_rule_per_template_and_split_and_the_best_single_rule():
    seen = AAPL_LOW | {"extra_info": {**AAPL_LOW["extra_info"], "entity_split": "seen"}}
    rules = [Rule(("get_stock_price",), "close"), Rule(("get_stock_price",), "low")]
    summary = score_rules([AAPL_LOW, seen], rules)
    best = {"rule": "get_stock_price, follow errors, answer low", "success": 1.0, "questions": 1}
    assert summary == {
        "rules": 2,
        "rows": 2,
        "templates": {"price_field": {"seen": best, "unseen": best}},
        "overall": {split: best | {"per_template": {"price_field": 1.0}} for split in ("seen", "unseen")},
    }


def test_the_rules_cover_every_sequence_and_answer():
    assert len(RULES) == 11 * len(ANSWERS)


def test_cli_prints_the_best_rules_and_writes_the_json(tmp_path, capsys):
    data = tmp_path / "validation.jsonl"
    data.write_text(json.dumps(AAPL_LOW) + "\n")
    assert main([str(data), "--json", str(tmp_path / "baseline.json")]) == 0
    out = capsys.readouterr().out
    assert "price_field [unseen]: 1.000 of 1  (get_stock_price, follow errors, answer low)" in out
    assert json.loads((tmp_path / "baseline.json").read_text())["overall"]["unseen"]["success"] == 1.0


def test_a_field_of_a_price_history_is_read_from_its_last_record():
    history = '{"ticker":"MSFT","count":2,"results":[{"date":"2024-03-27","close":333.91},{"date":"2024-03-28","close":331.0}]}'
    assert (_answer_text("close", history), _answer_text("first number", history)) == ("331.0", "2.0")
