"""Rule-based question generation: rows per the schema, ground truth from the real servers, deterministic, disjoint."""

from __future__ import annotations

import json
import logging
import random
from unittest.mock import ANY

import pyarrow.parquet as pq
import pytest

from skyrl_integrations.datasets.rule_based import (
    HELD_OUT_COMPANIES,
    HELD_OUT_MONTHS,
    SYSTEM_PROMPT,
    TEMPLATES,
    TaskGenerationError,
    ToolRunner,
    Universe,
    _run,
    answer_tolerance,
    generate_tasks,
    main,
)
from skyrl_integrations.datasets.schema import complexity_for, validate_row
from skyrl_integrations.mcp.client import MCPToolGroup
from skyrl_integrations.mcp.scoring import NUMERIC_REL_TOL, GroundTruth, answer_matches
from skyrl_integrations.mcp.servers.market.data import MARKET
from skyrl_integrations.mcp.spec import MCPServerSpec


@pytest.fixture(scope="module")
def market_tasks():
    return generate_tasks(3, 1, seed=0)


def test_generation_reports_its_progress_in_the_log_without_a_terminal(caplog):
    with caplog.at_level(logging.INFO, logger="skyrl_integrations.datasets.rule_based"):
        generate_tasks(1, 1, seed=0)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("generate questions: 2/2 questions done (")


def test_default_tasks_are_single_market_questions_with_answers_from_the_server(market_tasks):
    assert [(t.split, t.user_prompt, t.expected_answer) for t in market_tasks] == [
        ("train", "What was MSFT's net income in 2024-Q4, in millions of USD?", "17548.5"),
        ("train", "What was the closing price of XRP on 2024-03-12?", "0.7107"),
        ("train", "How many GOOGL shares traded on 2024-08-19?", "7877627"),
        ("validation", "What was AMZN's earnings per share (EPS) in 2024-Q1?", "0.85"),
    ]


MARKET_TOOLS = [
    "get_stock_price",
    "get_price_history",
    "get_crypto_price",
    "get_company_profile",
    "get_financials",
    "search_tickers",
]


def test_rows_follow_the_dataset_contract(market_tasks):
    row = market_tasks[3].to_row()
    validate_row(row)
    assert row == {
        "data_source": "mcp/market/eps",
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "What was AMZN's earnings per share (EPS) in 2024-Q1?"},
        ],
        "env_class": "mcp_tool",
        "reward_spec": {
            "method": "rule",
            "ground_truth": {
                "task_id": "market-eps-9b7a611bb5",
                "complexity": "single",
                "max_turns": 3,  # a call, an answer, and a turn for a look-up or a corrected call
                "success": {
                    "must_call_tool": True,
                    "expected_answer": "0.85",
                    "answer_match": "numeric",
                    "tolerance": 0.001,
                },
                "tool_sequence": [
                    {
                        "step": 1,
                        "server": "market",
                        "tool": "get_financials",
                        "params": {"ticker": "AMZN", "period": "2024-Q1"},
                    }
                ],
                "limits": {"max_servers": 1, "max_tools": 4},
            },
        },
        "extra_info": {
            "template": "eps",
            "generator": "rule_based",
            "servers": ["market"],
            "tools": MARKET_TOOLS,  # every tool of the servers in use: choosing one is the agent's job
            "split": "validation",
            "index": 0,
        },
    }


def test_expected_answer_is_what_replaying_the_tool_sequence_returns(market_tasks):
    group = MCPToolGroup(MCPServerSpec.bundled("market"))
    step = market_tasks[3].tool_sequence[0]
    result = json.loads(group.call_tool(step.tool, step.params).text)
    assert str(result["eps"]) == market_tasks[3].expected_answer


@pytest.mark.parametrize("reply", ["0.85", "0.85 USD", "The EPS was 0.85."])
def test_numeric_answers_match_common_formattings(market_tasks, reply):
    truth = GroundTruth.parse(market_tasks[3].to_row()["reward_spec"]["ground_truth"])
    assert answer_matches(truth, reply)


def test_free_text_arguments_are_left_out_of_params():
    task = generate_tasks(1, 0, seed=0, servers=["search"], complexities=["multi_step"])[0]
    assert [s.to_dict() for s in task.tool_sequence] == [
        {"step": 1, "server": "search", "tool": "web_search", "params": {}},
        {
            "step": 2,
            "server": "search",
            "tool": "fetch_page",
            "params": {"url": "https://helix-robotics.example/investors"},
        },
    ]
    assert (task.user_prompt, task.expected_answer, task.answer_match) == (
        "Who is the chief executive of Helix Robotics Inc.?",
        "Bjorn Okonkwo",
        "contains",
    )


def test_cross_server_task_finds_the_ticker_by_search_then_asks_the_market():
    task = generate_tasks(1, 0, seed=3, servers=["search", "market"], complexities=["cross_server"])[0]
    assert (task.complexity, task.servers, task.data_source) == (
        "cross_server",
        ["search", "market"],
        "mcp/search/product_maker_close",
    )
    assert [(s.server, s.tool) for s in task.tool_sequence] == [("search", "web_search"), ("market", "get_stock_price")]
    assert task.tools == ["web_search", "fetch_page", *MARKET_TOOLS]


def test_every_template_makes_tasks_of_its_declared_complexity():
    runner = ToolRunner()
    made = {}
    try:
        for t in TEMPLATES.values():
            task = generate_tasks(
                1, 0, servers=t.servers, complexities=[t.complexity], templates=[t.name], runner=runner
            )
            made[t.name] = (task[0].extra["template"], complexity_for(task[0].tool_sequence))
    finally:
        runner.close()
    assert made == {t.name: (t.name, t.complexity) for t in TEMPLATES.values()}


def test_templates_option_restricts_the_templates():
    tasks = generate_tasks(5, 0, templates=["close_price"])
    assert {t.extra["template"] for t in tasks} == {"close_price"}


def test_unknown_template_is_rejected():
    with pytest.raises(TaskGenerationError, match=r"unknown templates \['close'\]; templates: \["):
        generate_tasks(1, 0, templates=["close"])


def test_train_and_validation_share_no_question():
    tasks = generate_tasks(40, 10, seed=5, complexities=["single", "multi_step"], servers=["market"])
    train = {t.user_prompt for t in tasks if t.split == "train"}
    validation = {t.user_prompt for t in tasks if t.split == "validation"}
    assert (len(train), len(validation), train & validation) == (40, 10, set())


def test_another_seed_gives_other_tasks(market_tasks):
    assert {t.user_prompt for t in generate_tasks(3, 1, seed=1)}.isdisjoint({t.user_prompt for t in market_tasks})


def test_cli_writes_identical_files_for_the_same_seed(tmp_path):
    args = ["--train-size", "6", "--val-size", "2", "--seed", "7", "--complexities", "single,multi_step"]
    main(["--output-dir", str(tmp_path / "a"), *args])
    main(["--output-dir", str(tmp_path / "b"), *args])
    for name in ("train.jsonl", "validation.jsonl", "train.parquet", "validation.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_cli_writes_the_requested_split_sizes(tmp_path):
    main(["--output-dir", str(tmp_path), "--train-size", "6", "--val-size", "2", "--seed", "7"])
    train, validation = (pq.read_table(tmp_path / f"{s}.parquet").to_pylist() for s in ("train", "validation"))
    assert (len(train), len(validation)) == (6, 2)
    assert {r["extra_info"]["split"] for r in train} | {r["extra_info"]["split"] for r in validation} == {
        "train",
        "validation",
    }


def test_extra_turns_sets_each_rows_turn_budget_beyond_its_calls(tmp_path):
    args = ["--train-size", "4", "--val-size", "0", "--complexities", "single,multi_step"]
    main(["--output-dir", str(tmp_path / "default"), *args])
    main(["--output-dir", str(tmp_path / "more"), *args, "--extra-turns", "2"])
    for folder, extra in (("default", 1), ("more", 2)):
        rows = pq.read_table(tmp_path / folder / "train.parquet").to_pylist()
        truths = [r["reward_spec"]["ground_truth"] for r in rows]
        assert [t["max_turns"] for t in truths] == [len(t["tool_sequence"]) + 1 + extra for t in truths]
    with pytest.raises(TaskGenerationError, match="extra_turns must be >= 0, got -1"):
        generate_tasks(1, 0, extra_turns=-1)


def test_unknown_server_is_rejected_naming_the_known_ones():
    with pytest.raises(TaskGenerationError, match=r"servers must be a non-empty subset of \['market', 'python', 'search', 'slack'\]"):  # fmt: skip
        generate_tasks(1, 0, servers=["weather"])


def test_cross_server_with_one_server_is_rejected():
    with pytest.raises(TaskGenerationError, match="no cross_server templates use only the servers \\['market'\\]"):
        generate_tasks(1, 0, servers=["market"], complexities=["cross_server"])


def test_asking_for_more_tasks_than_the_templates_can_make_fails_loudly():
    with pytest.raises(TaskGenerationError, match=r"only \d+/50 train and 0/0 validation distinct questions"):
        generate_tasks(50, 0, servers=["slack"], complexities=["single"])


FIELD_TEMPLATES = [
    "close_price",
    "close_by_name",
    "open_price",
    "volume",
    "crypto_close",
    "crypto_close_by_name",
    "revenue",
    "eps",
    "employees",
]


@pytest.fixture(scope="module")
def field_tasks():
    return generate_tasks(45, 0, seed=4, templates=FIELD_TEMPLATES, balance_templates=True)


def test_no_other_field_of_the_record_passes_the_answer_check(field_tasks):
    """The reward's answer check accepts the asked field only: every other number the tool returned fails."""
    group = MCPToolGroup(MCPServerSpec.bundled("market"))
    checked = 0
    for task in field_tasks:
        truth = GroundTruth.parse(task.to_row()["reward_spec"]["ground_truth"])
        step = task.tool_sequence[0]
        record = json.loads(group.call_tool(step.tool, step.params).text)
        numbers = [v for v in record.values() if isinstance(v, int | float)]
        others = [v for v in numbers if v != float(task.expected_answer)]
        assert answer_matches(truth, task.expected_answer), task.user_prompt
        assert len(others) == len(numbers) - 1, task.user_prompt  # the asked field, and only it, holds the answer
        for value in others:
            assert not answer_matches(truth, str(value)), (task.user_prompt, value)
            checked += 1
    others_per_record = {"get_stock_price": 4, "get_crypto_price": 4, "get_financials": 2, "get_company_profile": 0}
    assert checked == sum(others_per_record[t.tool_sequence[0].tool] for t in field_tasks)
    assert len(field_tasks) == 45


def test_the_tolerance_stays_below_half_the_gap_to_the_nearest_other_number():
    outputs = [{"open": 100.0, "close": 100.02, "high": 101.0, "volume": 5}]
    assert answer_tolerance("100.02", outputs) == pytest.approx(0.4 * 0.02 / 100.02)
    assert answer_tolerance("5", [{"count": 5, "n": 5}, "see 7 items"]) is None  # another field: same value
    numbers_in_text = [{"count": 5}, "see 5.001 items on 2024-05-05"]  # the date is not a number to the scorer
    assert answer_tolerance("5", numbers_in_text) == pytest.approx(0.4 * 0.001 / 5)
    assert answer_tolerance("187.23", [{"close": 187.23, "volume": 7074920}]) == NUMERIC_REL_TOL


def test_balanced_templates_get_equal_shares_of_each_split_and_a_data_source_each():
    templates = ["close_price", "employees", "revenue"]
    tasks = generate_tasks(9, 6, seed=2, templates=templates, balance_templates=True)
    counts = {(t.split, t.extra["template"]) for t in tasks}
    assert sorted(counts) == sorted((split, name) for split in ("train", "validation") for name in templates)
    per_split = {
        split: sorted(t.extra["template"] for t in tasks if t.split == split) for split in ("train", "validation")
    }
    assert per_split == {"train": sorted(templates * 3), "validation": sorted(templates * 2)}
    assert {t.data_source for t in tasks} == {f"mcp/market/{name}" for name in templates}


HOLDING_OUT = ["price_field", "price_field_by_name", "financial_field", "month_end_close"]


def _entity_tasks(**options):
    return generate_tasks(
        24,
        8,
        seed=0,
        complexities=["single", "multi_step"],
        templates=HOLDING_OUT,
        held_out_entities=True,
        seen_val_size=8,
        **options,
    )


@pytest.fixture(scope="module")
def entity_tasks():
    return _entity_tasks()


def _companies(tasks):
    return {t.extra["entity"].partition("/")[0] for t in tasks}


def _months(tasks):
    return {int(t.extra["entity"][-2:]) for t in tasks if "/" in t.extra["entity"]}


def test_held_out_questions_name_no_company_or_month_of_training(entity_tasks):
    train = [t for t in entity_tasks if t.split == "train"]
    unseen = [t for t in entity_tasks if t.extra.get("entity_split") == "unseen"]
    assert _companies(unseen) <= HELD_OUT_COMPANIES and _companies(train).isdisjoint(HELD_OUT_COMPANIES)
    assert _months(unseen) <= HELD_OUT_MONTHS and _months(train).isdisjoint(HELD_OUT_MONTHS)


def test_seen_questions_name_training_entities_in_questions_training_does_not_ask(entity_tasks):
    train = [t for t in entity_tasks if t.split == "train"]
    seen = [t for t in entity_tasks if t.extra.get("entity_split") == "seen"]
    assert _companies(seen).isdisjoint(HELD_OUT_COMPANIES) and _months(seen).isdisjoint(HELD_OUT_MONTHS)
    assert {t.user_prompt for t in seen}.isdisjoint(t.user_prompt for t in train)
    assert {t.split for t in seen} == {"validation"}


def test_each_split_has_an_equal_share_per_template_and_seen_rows_a_data_source_of_their_own(entity_tasks):
    counts = {}
    for task in entity_tasks:
        key = (task.extra["entity_split"], task.data_source)
        counts[key] = counts.get(key, 0) + 1
    assert counts == {
        **{("train", f"mcp/market/{name}"): 6 for name in HOLDING_OUT},
        **{("unseen", f"mcp/market/{name}"): 2 for name in HOLDING_OUT},
        **{("seen", f"mcp/market/{name}/seen"): 2 for name in HOLDING_OUT},
    }


def test_a_by_name_question_names_the_company_and_counts_a_search_only_if_it_found_the_ticker(entity_tasks):
    task = next(t for t in entity_tasks if t.extra["template"] == "price_field_by_name")
    company = MARKET.companies[task.extra["entity"]]
    assert (task.extra["entity_text"], company.name in task.user_prompt) == (company.name, True)
    assert [s.to_dict() for s in task.tool_sequence] == [
        {"step": 1, "server": "market", "tool": "search_tickers", "params": {}, "result_contains": company.ticker},
        {"step": 2, "server": "market", "tool": "get_stock_price", "params": {"ticker": company.ticker, "date": ANY}},
    ]
    assert task.max_turns == 4


def test_price_questions_ask_for_different_fields(entity_tasks):
    asked = {
        word
        for t in entity_tasks
        if t.extra["template"] == "price_field"
        for word in ("opening", "highest", "lowest", "closing", "shares")
        if word in t.user_prompt
    }
    assert len(asked) >= 3


def test_month_end_close_is_the_close_of_the_months_last_trading_day():
    runner = ToolRunner()
    try:
        u = Universe()
        draft = _month_end_draft(u)
        ran = _run(draft, runner)
    finally:
        runner.close()
    # 2024-03-31 is a Sunday and 2024-03-29 Good Friday: the last trading day is 2024-03-28 (MSFT closed at 331.0).
    assert (draft.question, ran.answer) == (
        "What was the closing price of MSFT on the last trading day of March 2024?",
        "331",
    )
    assert ran.steps[0].params == {"ticker": "MSFT", "start_date": "2024-03-01", "end_date": "2024-03-31"}


def _month_end_draft(u):
    """A month-end draft for MSFT and March, from a random generator that draws them."""
    for seed in range(500):
        draft = TEMPLATES["month_end_close"].make(random.Random(seed), u)
        if draft.entity == "MSFT/2024-03":
            return draft
    raise AssertionError("no seed below 500 draws MSFT and March")


@pytest.fixture(scope="module")
def hinted_tasks():
    """`entity_tasks` again with half of the training questions hinted."""
    return _entity_tasks(hint_fraction=0.5)


def test_hints_end_some_training_questions_and_change_nothing_else(entity_tasks, hinted_tasks):
    hinted = [t for t in hinted_tasks if t.extra.get("hint")]
    assert 0 < len(hinted) < 24 and {t.split for t in hinted} == {"train"}
    by_id = {t.task_id: t for t in entity_tasks}
    assert [t.task_id for t in hinted_tasks] == [t.task_id for t in entity_tasks]
    for task in hinted_tasks:
        plain = by_id[task.task_id]
        assert task.tool_sequence == plain.tool_sequence and task.expected_answer == plain.expected_answer
        if task in hinted:
            assert task.user_prompt == f"{plain.user_prompt} {task.extra['hint']}"
            assert task.extra["hint"].startswith("Hint: ")
        else:
            assert task.user_prompt == plain.user_prompt


def test_a_hint_names_the_tools_and_the_field_of_its_question(hinted_tasks):
    hints = {t.extra["template"]: t.user_prompt.partition(" Hint: ")[2] for t in hinted_tasks if t.extra.get("hint")}
    assert hints["financial_field"].startswith("get_financials gives the period's ")
    assert hints["price_field_by_name"].startswith("search_tickers finds the company's ticker, then get_stock_price")
    assert hints["month_end_close"] == "get_price_history lists the month's trading days; the last one's close is the answer."  # fmt: skip
    field = hints["price_field"].removeprefix("get_stock_price gives the day's ").rstrip(".")
    assert field in {"open", "high", "low", "close", "volume"}


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_a_hint_fraction_outside_zero_to_one_is_refused(fraction):
    with pytest.raises(TaskGenerationError, match=f"hint_fraction must be between 0 and 1, got {fraction}"):
        generate_tasks(4, 2, templates=["price_field"], hint_fraction=fraction)


def test_held_out_entities_refuse_templates_that_do_not_hold_entities_out():
    with pytest.raises(TaskGenerationError, match=r"templates \['close_price'\] do not hold entities out; choose"):
        generate_tasks(4, 2, templates=["close_price", "price_field"], held_out_entities=True)


def test_a_seen_split_needs_held_out_entities():
    with pytest.raises(TaskGenerationError, match="seen_val_size needs held_out_entities"):
        generate_tasks(4, 2, templates=["price_field"], seen_val_size=2)


def test_cli_with_held_out_entities_keeps_the_generators_split(tmp_path):
    main(
        ["--output-dir", str(tmp_path), "--train-size", "4", "--val-size", "2", "--seen-val-size", "2"]
        + ["--templates", "price_field,financial_field", "--held-out-entities"]
    )
    train, validation = (pq.read_table(tmp_path / f"{s}.parquet").to_pylist() for s in ("train", "validation"))
    assert [r["extra_info"]["entity_split"] for r in train] == ["train"] * 4
    assert sorted(r["extra_info"]["entity_split"] for r in validation) == ["seen", "seen", "unseen", "unseen"]
