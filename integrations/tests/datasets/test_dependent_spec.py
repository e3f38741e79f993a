"""The dependent-spec converter. ``data/dependent_spec_example.jsonl`` is the documented input example: an object
with OpenAI ``tool_calls`` and a text call, one mixing servers, and a bare message list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyrl_integrations.datasets.dependent_spec import (
    ConversationError,
    ConversionOptions,
    convert_files,
    main,
)
from skyrl_integrations.datasets.schema import ToolStep
from skyrl_integrations.datasets.validate import validate_files
from skyrl_integrations.mcp.prompt import DEFAULT_ROLE

EXAMPLE = Path(__file__).parent / "data" / "dependent_spec_example.jsonl"
TOOL_MAP = {
    "search_tickers": "market",
    "get_stock_price": "market",
    "get_company_profile": "market",
    "web_search": "search",
}
OPTIONS = ConversionOptions(tool_servers=TOOL_MAP)
PROFILE = '{"ticker":"HLXR","exchange":"NASDAQ","employees":4200}'


def call(name: str, **arguments) -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def write(tmp_path, *conversations) -> str:
    path = tmp_path / "specs.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in conversations))
    return str(path)


def convert(tmp_path, *conversations, options=OPTIONS, **kwargs):
    return convert_files([write(tmp_path, *conversations)], options, **kwargs)


def test_user_turns_merge_into_one_compact_instruction():
    (task, _, _), _ = convert_files([EXAMPLE], OPTIONS)
    assert task.system_prompt == "You are a market analyst with tools."
    assert task.user_prompt == (
        "Complete these steps in order; later steps use the results of earlier ones:\n"
        "1. Find the ticker of Helix Robotics.\n"
        "2. Now get its closing price on 2024-03-15."
    )


def test_openai_and_text_calls_become_the_tool_sequence():
    tasks, _ = convert_files([EXAMPLE], OPTIONS)
    assert [t.tool_sequence for t in tasks] == [
        [
            ToolStep(1, "market", "search_tickers", {"query": "Helix Robotics"}),
            ToolStep(2, "market", "get_stock_price", {"ticker": "HLXR", "date": "2024-03-15"}),
        ],
        [
            ToolStep(1, "search", "web_search", {"query": "Strider warehouse robot", "max_results": 1}),
            ToolStep(2, "market", "get_company_profile", {"ticker": "HLXR"}),
        ],
        [ToolStep(1, "market", "get_company_profile", {"ticker": "HLXR"})],
    ]


def test_answer_complexity_and_ids_of_the_example():
    tasks, _ = convert_files([EXAMPLE], OPTIONS)
    assert [(t.task_id, t.complexity, t.expected_answer, t.answer_match, t.max_turns) for t in tasks] == [
        ("helix-close", "multi_step", "37.96", "numeric", 3),
        ("strider-employees", "cross_server", "4200", "numeric", 3),
        ("dependent_spec_example-0003", "single", "NASDAQ", "contains", 2),
    ]


def test_conversation_without_system_message_gets_the_env_role():
    tasks, _ = convert_files([EXAMPLE], OPTIONS)
    assert tasks[2].system_prompt == DEFAULT_ROLE
    assert tasks[2].to_row()["prompt"] == [
        {"role": "system", "content": DEFAULT_ROLE},
        {"role": "user", "content": "Which exchange lists HLXR?"},
    ]


def test_cli_converts_the_example_with_the_bundled_servers_and_the_rows_replay(tmp_path, capsys):
    out = tmp_path / "out"
    argv = [str(EXAMPLE), "--output-dir", str(out), "--servers", "market,search", "--val-ratio", "0"]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[0] == "converted 3 conversation(s); skipped 0"
    reports = validate_files([str(out / "train.parquet"), str(out / "validation.parquet")], execute=True)
    assert [(r.rows, r.problems) for r in reports] == [(3, []), (0, [])]


def test_answer_from_the_last_tool_result_field(tmp_path):
    conversation = [{"role": "user", "content": "Employees of HLXR?"}, call("get_company_profile", ticker="HLXR")]
    conversation.append({"role": "tool", "content": PROFILE})
    options = ConversionOptions(tool_servers=TOOL_MAP, answer_from="last_tool_result", answer_field="employees")
    (task,), _ = convert(tmp_path, conversation, options=options)
    assert (task.expected_answer, task.answer_match) == ("4200", "numeric")


def test_last_tool_result_object_without_field_is_an_error(tmp_path):
    conversation = [{"role": "user", "content": "Employees of HLXR?"}, call("get_company_profile", ticker="HLXR")]
    conversation.append({"role": "tool", "content": PROFILE})
    options = ConversionOptions(tool_servers=TOOL_MAP, answer_from="last_tool_result")
    with pytest.raises(ConversationError) as info:
        convert(tmp_path, conversation, options=options)
    assert str(info.value).endswith(
        "specs.jsonl:1: message 2: the last tool result is not a scalar; pass --answer-field PATH"
    )


def test_call_without_tool_result_names_file_line_and_message(tmp_path):
    good = [{"role": "user", "content": "Exchange of HLXR?"}, call("get_company_profile", ticker="HLXR")]
    good += [{"role": "tool", "content": PROFILE}, {"role": "assistant", "content": "NASDAQ"}]
    bad = [{"role": "user", "content": "Price?"}, call("get_stock_price", ticker="HLXR", date="2024-03-15")]
    bad += [{"role": "assistant", "content": "37.96"}]
    with pytest.raises(ConversationError) as info:
        convert(tmp_path, good, bad)
    assert str(info.value) == (
        f"{tmp_path}/specs.jsonl:2: message 2: 1 tool call(s) of the previous assistant message have no tool result"
    )


def test_unknown_tool_is_an_error(tmp_path):
    conversation = [{"role": "user", "content": "Weather?"}, call("forecast", city="Oslo")]
    with pytest.raises(ConversationError, match=r"specs.jsonl:1: message 1: tool 'forecast' is not offered"):
        convert(tmp_path, conversation)


def test_tool_message_without_a_call_is_an_error(tmp_path):
    conversation = [{"role": "user", "content": "Hi"}, {"role": "tool", "content": "{}"}]
    with pytest.raises(ConversationError, match=r"message 1: a tool message that answers no tool call"):
        convert(tmp_path, conversation)


def test_unreadable_text_call_is_an_error(tmp_path):
    conversation = [{"role": "user", "content": "Price?"}]
    conversation.append(
        {"role": "assistant", "content": '<tool_call>{"name": "get_stock_price", "arguments": </tool_call>'}
    )
    with pytest.raises(ConversationError, match=r"message 1: unreadable tool call \(malformed_json\)"):
        convert(tmp_path, conversation)


def test_conversation_without_calls_is_an_error(tmp_path):
    conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    with pytest.raises(ConversationError, match=r"specs.jsonl:1: the conversation makes no tool call"):
        convert(tmp_path, conversation)


def test_conversation_must_end_with_an_answer(tmp_path):
    conversation = [{"role": "user", "content": "Exchange?"}, call("get_company_profile", ticker="HLXR")]
    conversation.append({"role": "tool", "content": PROFILE})
    with pytest.raises(ConversationError, match=r"message 2: the conversation must end with an assistant answer"):
        convert(tmp_path, conversation)


def test_invalid_json_line_is_an_error(tmp_path):
    path = tmp_path / "specs.jsonl"
    path.write_text(EXAMPLE.read_text().splitlines()[0] + "\n{oops\n")
    with pytest.raises(ConversationError, match=r"specs.jsonl:2: invalid JSON"):
        convert_files([str(path)], OPTIONS)


def test_more_distinct_tools_than_max_tools_is_an_error(tmp_path):
    options = ConversionOptions(tool_servers=TOOL_MAP, max_tools=1)
    with pytest.raises(ConversationError, match=r":1: 2 distinct tools, more than --max-tools 1"):
        convert_files([EXAMPLE], options)


def test_skip_invalid_drops_and_counts(tmp_path, capsys):
    good = [{"role": "user", "content": "Exchange of HLXR?"}, call("get_company_profile", ticker="HLXR")]
    good += [{"role": "tool", "content": PROFILE}, {"role": "assistant", "content": "NASDAQ"}]
    no_call = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    tasks, skipped = convert(tmp_path, no_call, good, no_call, skip_invalid=True)
    assert [t.task_id for t in tasks] == ["specs-0002"]
    assert skipped == {"the conversation makes no tool call": 2}
    assert capsys.readouterr().err.count("skipped: ") == 2


def test_json_file_with_an_array_of_conversations(tmp_path):
    conversations = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    path = tmp_path / "specs.json"
    path.write_text(json.dumps(conversations, indent=2))
    tasks, _ = convert_files([str(path)], OPTIONS)
    assert [t.task_id for t in tasks] == ["helix-close", "strider-employees", "specs-0003"]


def test_cli_refuses_to_overwrite_before_converting(tmp_path, capsys):
    tool_map = tmp_path / "tools.json"
    tool_map.write_text(json.dumps(TOOL_MAP))
    argv = [str(EXAMPLE), "--output-dir", str(tmp_path), "--tool-map", str(tool_map)]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 1
    assert capsys.readouterr().err.startswith(f"error: refusing to overwrite existing {tmp_path}/train.parquet")
