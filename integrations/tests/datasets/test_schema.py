"""The MCP dataset row schema: defaults, round trip, and one test per validation rule."""

from __future__ import annotations

import pytest

from skyrl_integrations.datasets.schema import (
    TaskRow,
    TaskRowError,
    ToolStep,
    complexity_for,
    row_problems,
    validate_row,
)


def keys(row) -> list[str]:
    return [key for key, _ in row_problems(row)]


def test_defaults_are_derived_from_the_tool_sequence(make_task):
    task = make_task()
    assert (task.complexity, task.max_turns, task.servers, task.tools) == ("single", 2, ["market"], ["get_stock_price"])
    assert (task.max_servers, task.max_tools, task.data_source) == (1, 4, "mcp/market")


def test_to_row_has_the_contract_layout(make_task):
    row = make_task().to_row()
    assert row == {
        "data_source": "mcp/market",
        "prompt": [
            {"role": "system", "content": "You answer by calling tools."},
            {"role": "user", "content": "What was AAPL's closing price on 2024-03-15?"},
        ],
        "env_class": "mcp_tool",
        "reward_spec": {
            "method": "rule",
            "ground_truth": {
                "task_id": "market-0001",
                "complexity": "single",
                "max_turns": 2,
                "success": {"must_call_tool": True, "expected_answer": "176.78", "answer_match": "numeric"},
                "tool_sequence": [
                    {
                        "step": 1,
                        "server": "market",
                        "tool": "get_stock_price",
                        "params": {"ticker": "AAPL", "date": "2024-03-15"},
                    }
                ],
                "limits": {"max_servers": 1, "max_tools": 4},
            },
        },
        "extra_info": {"servers": ["market"], "tools": ["get_stock_price"], "split": "train", "index": 0},
    }


def test_validate_row_parses_back_the_same_task(make_task):
    task = make_task(extra={"generator": "test"}, split="validation", index=3)
    assert validate_row(task.to_row()) == task


def test_complexity_for_counts_steps_and_servers():
    one = ToolStep(1, "market", "a")
    assert complexity_for([one]) == "single"
    assert complexity_for([one, ToolStep(2, "market", "b")]) == "multi_step"
    assert complexity_for([one, ToolStep(2, "search", "c")]) == "cross_server"


def test_prompt_must_be_system_and_user_only(make_task):
    row = make_task().to_row()
    row["prompt"].append({"role": "assistant", "content": "ok"})
    assert row_problems(row) == [
        ("prompt", "expected a compact prompt with roles ['system', 'user'], got roles ['system', 'user', 'assistant']")
    ]


def test_empty_user_message_is_reported(make_task):
    row = make_task().to_row()
    row["prompt"][1]["content"] = "  "
    assert keys(row) == ["prompt[1].content"]


def test_env_class_must_be_mcp_tool(make_task):
    row = make_task().to_row()
    row["env_class"] = "gsm8k"
    assert row_problems(row) == [("env_class", "expected 'mcp_tool', got 'gsm8k'")]


def test_steps_must_be_numbered_consecutively(make_task):
    steps = [ToolStep(1, "market", "get_stock_price"), ToolStep(3, "market", "get_company_profile")]
    row = make_task(tool_sequence=steps).to_row()
    assert keys(row) == ["reward_spec.ground_truth.tool_sequence[1].step"]


def test_step_tool_must_be_listed_in_extra_info(make_task):
    row = make_task(tools=["get_company_profile"]).to_row()
    assert row_problems(row) == [
        (
            "reward_spec.ground_truth.tool_sequence[0].tool",
            "'get_stock_price' is not listed in extra_info.tools ['get_company_profile']",
        )
    ]


def test_step_server_must_be_listed_in_extra_info(make_task):
    steps = [ToolStep(1, "market", "get_stock_price"), ToolStep(2, "search", "web_search")]
    row = make_task(tool_sequence=steps, servers=["market"], max_servers=2).to_row()
    assert keys(row) == ["reward_spec.ground_truth.tool_sequence[1].server"]


def test_more_distinct_tools_than_max_tools_is_reported(make_task):
    steps = [ToolStep(1, "market", "get_stock_price"), ToolStep(2, "market", "get_company_profile")]
    row = make_task(tool_sequence=steps, max_tools=1).to_row()
    assert row_problems(row) == [
        (
            "reward_spec.ground_truth.limits.max_tools",
            "the tool_sequence uses 2 tools ['get_company_profile', 'get_stock_price'], more than max_tools=1",
        )
    ]


def test_repeated_calls_of_one_tool_fit_max_tools_one(make_task):
    steps = [ToolStep(1, "market", "get_stock_price"), ToolStep(2, "market", "get_stock_price")]
    assert row_problems(make_task(tool_sequence=steps, max_tools=1).to_row()) == []


def test_more_servers_than_max_servers_is_reported(make_task):
    steps = [ToolStep(1, "market", "get_stock_price"), ToolStep(2, "search", "web_search")]
    row = make_task(tool_sequence=steps, max_servers=1).to_row()
    assert keys(row) == ["reward_spec.ground_truth.limits.max_servers"]


def test_max_turns_below_the_number_of_steps_is_reported(make_task):
    steps = [ToolStep(1, "market", "get_stock_price"), ToolStep(2, "market", "get_company_profile")]
    row = make_task(tool_sequence=steps, max_turns=1).to_row()
    assert keys(row) == ["reward_spec.ground_truth.max_turns"]


def test_complexity_must_match_the_sequence(make_task):
    row = make_task(complexity="cross_server").to_row()
    assert row_problems(row) == [
        (
            "reward_spec.ground_truth.complexity",
            "'cross_server' does not match the tool_sequence (1 step(s) on 1 server(s) is 'single')",
        )
    ]


def test_numeric_answer_must_be_a_number(make_task):
    row = make_task(expected_answer="about 187").to_row()
    assert row_problems(row) == [
        (
            "reward_spec.ground_truth.success.expected_answer",
            "answer_match is 'numeric' but 'about 187' is not a number",
        )
    ]


def test_unknown_answer_match_is_reported(make_task):
    row = make_task(answer_match="fuzzy").to_row()
    assert keys(row) == ["reward_spec.ground_truth.success.answer_match"]


def test_split_must_be_train_or_validation(make_task):
    row = make_task(split="test").to_row()
    assert row_problems(row) == [("extra_info.split", "expected one of train, validation, got 'test'")]


def test_data_source_must_name_a_listed_server(make_task):
    row = make_task(data_source="mcp/slack").to_row()
    assert row_problems(row) == [("data_source", "server of 'mcp/slack' is not in extra_info.servers ['market']")]


def test_missing_ground_truth_is_reported(make_task):
    row = make_task().to_row()
    del row["reward_spec"]["ground_truth"]
    assert row_problems(row) == [("reward_spec.ground_truth", "expected an object, got nothing")]


def test_error_names_where_and_every_bad_key(make_task):
    row = make_task(split="test").to_row()
    row["env_class"] = None
    with pytest.raises(TaskRowError) as info:
        validate_row(row, where="train.parquet row 7")
    assert str(info.value) == (
        "train.parquet row 7: invalid MCP dataset row\n"
        "  key 'env_class': expected 'mcp_tool', got None\n"
        "  key 'extra_info.split': expected one of train, validation, got 'test'"
    )


def test_non_object_row_is_reported():
    assert row_problems(["not", "a", "row"]) == [("<row>", "expected an object, got list")]


def test_task_row_from_row_rejects_invalid_rows(make_task):
    row = make_task().to_row()
    row["reward_spec"]["method"] = "reward_model"
    with pytest.raises(TaskRowError, match="reward_spec.method"):
        TaskRow.from_row(row, where="x")
