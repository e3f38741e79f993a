"""Rule-based task generation: rows per the schema, ground truth from the real servers, deterministic, disjoint."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from skyrl_integrations.datasets.rule_based import (
    SYSTEM_PROMPT,
    TEMPLATES,
    TaskGenerationError,
    ToolRunner,
    generate_tasks,
    main,
)
from skyrl_integrations.datasets.schema import complexity_for, validate_row
from skyrl_integrations.mcp.client import MCPToolGroup
from skyrl_integrations.mcp.scoring import GroundTruth, answer_matches
from skyrl_integrations.mcp.spec import MCPServerSpec


@pytest.fixture(scope="module")
def market_tasks():
    return generate_tasks(3, 1, seed=0)


def test_default_tasks_are_single_market_questions_with_answers_from_the_server(market_tasks):
    assert [(t.split, t.user_prompt, t.expected_answer) for t in market_tasks] == [
        ("train", "Which sector is AMZN in?", "Consumer Cyclical"),
        ("train", "What was TRLX's net income in 2024-Q3, in millions of USD?", "142.6"),
        ("train", "What was NWGD's revenue in FY2024, in millions of USD?", "2702.3"),
        ("validation", "What was the opening price of XOM on 2024-10-23?", "112.36"),
    ]


def test_rows_follow_the_dataset_contract(market_tasks):
    row = market_tasks[3].to_row()
    validate_row(row)
    assert row == {
        "data_source": "mcp/market",
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "What was the opening price of XOM on 2024-10-23?"},
        ],
        "env_class": "mcp_tool",
        "reward_spec": {
            "method": "rule",
            "ground_truth": {
                "task_id": "market-open_price-8d44c4b37b",
                "complexity": "single",
                "max_turns": 2,
                "success": {"must_call_tool": True, "expected_answer": "112.36", "answer_match": "numeric"},
                "tool_sequence": [
                    {
                        "step": 1,
                        "server": "market",
                        "tool": "get_stock_price",
                        "params": {"ticker": "XOM", "date": "2024-10-23"},
                    }
                ],
                "limits": {"max_servers": 1, "max_tools": 4},
            },
        },
        "extra_info": {
            "template": "open_price",
            "generator": "rule_based",
            "servers": ["market"],
            "tools": ["get_stock_price"],
            "split": "validation",
            "index": 0,
        },
    }


def test_expected_answer_is_what_replaying_the_tool_sequence_returns(market_tasks):
    group = MCPToolGroup(MCPServerSpec.bundled("market"))
    step = market_tasks[3].tool_sequence[0]
    result = json.loads(group.call_tool(step.tool, step.params).text)
    assert str(result["open"]) == market_tasks[3].expected_answer


@pytest.mark.parametrize("reply", ["$112.36", "112.36 USD", "It opened at 112.36."])
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
    assert (task.complexity, task.servers, task.data_source) == ("cross_server", ["search", "market"], "mcp/search")
    assert [(s.server, s.tool) for s in task.tool_sequence] == [("search", "web_search"), ("market", task.tools[1])]


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


def test_unknown_server_is_rejected_naming_the_known_ones():
    with pytest.raises(TaskGenerationError, match=r"servers must be a non-empty subset of \['market', 'python', 'search', 'slack'\]"):  # fmt: skip
        generate_tasks(1, 0, servers=["weather"])


def test_cross_server_with_one_server_is_rejected():
    with pytest.raises(TaskGenerationError, match="no cross_server templates use only the servers \\['market'\\]"):
        generate_tasks(1, 0, servers=["market"], complexities=["cross_server"])


def test_asking_for_more_tasks_than_the_templates_can_make_fails_loudly():
    with pytest.raises(TaskGenerationError, match=r"only \d+/50 train and 0/0 validation distinct tasks"):
        generate_tasks(50, 0, servers=["slack"], complexities=["single"])
