"""Bad SFT rows are refused before anything trains, with the file, the row and the field; over-long rows are refused or,
with `sft.truncation=truncate`, cut and counted."""

from __future__ import annotations

import copy

import pytest

from skyrl_train.dataset import DatasetValidationError
from skyrl_train.entrypoints.main_sft import main
from skyrl_train.sft.encoding import ConversationEncoder, SFTDataset

from .conftest import TOOL_CONVERSATION, write_jsonl

GOOD = {"messages": TOOL_CONVERSATION}


def with_message(index: int, **changes) -> dict:
    row = copy.deepcopy(GOOD)
    row["messages"][index].update(changes)
    return row


def with_arguments(arguments) -> dict:
    row = copy.deepcopy(GOOD)
    row["messages"][2]["tool_calls"][0]["function"]["arguments"] = arguments
    return row


@pytest.mark.parametrize(
    ("bad_row", "field", "says"),
    [
        ({"messages": TOOL_CONVERSATION[:2]}, "messages", "no assistant message"),
        (with_message(3, role="robot"), "messages[3].role", "got 'robot'"),
        (with_arguments('{"ticker": AAPL}'), "messages[2].tool_calls[0].function.arguments", "not JSON"),
        (with_arguments("[1, 2]"), "messages[2].tool_calls[0].function.arguments", "must be a JSON object, got list"),
        (with_arguments(7), "messages[2].tool_calls[0].function.arguments", "must be a JSON object, got int"),
        ({"messages": TOOL_CONVERSATION[4:]}, "messages[0].role", "starts with an assistant message"),
        (with_message(1, content=["Price?"]), "messages[1].content", "expected a string, got list"),
        (with_message(3, tool_calls=[]), "messages[3].tool_calls", "only an assistant message makes tool calls"),
        ({"conversation": TOOL_CONVERSATION}, "messages", "got missing"),
        (with_message(2, weight=2), "messages[2].weight", "expected 0 or 1"),
        (with_message(3, weight=0), "messages[3].weight", "only a completion's assistant message has a weight"),
        (
            {"messages": [*TOOL_CONVERSATION[:2], {"role": "assistant", "content": "x", "weight": 0}]},
            "messages",
            "no assistant message of weight 1",
        ),
        (
            {"prompt": TOOL_CONVERSATION[:1], "completion": TOOL_CONVERSATION[1:]},
            "completion[0].role",
            "must start with an assistant message",
        ),
        (
            {
                "prompt": [
                    *TOOL_CONVERSATION[:1],
                    {"role": "assistant", "content": "Hi", "weight": 0},
                    TOOL_CONVERSATION[1],
                ],
                "completion": TOOL_CONVERSATION[2:],
            },
            "prompt[1].weight",
            "only a completion's assistant message",
        ),
        ({"prompt": [], "completion": TOOL_CONVERSATION[2:]}, "prompt", "expected a non-empty list"),
    ],
    ids=[
        "no-assistant",
        "unknown-role",
        "arguments-not-json",
        "arguments-a-list",
        "arguments-a-number",
        "assistant-first",
        "content-not-text",
        "tool-calls-off-assistant",
        "no-messages",
        "weight-not-0-or-1",
        "weight-off-assistant",
        "nothing-of-weight-1",
        "completion-not-assistant-first",
        "weight-in-prompt",
        "empty-prompt",
    ],
)
def test_a_bad_row_is_refused_naming_file_row_and_field(tmp_path, tokenizer, bad_row, field, says):
    path = write_jsonl(tmp_path / "demos.jsonl", [GOOD, GOOD, bad_row, GOOD])
    with pytest.raises(DatasetValidationError) as error:
        SFTDataset([str(path)], ConversationEncoder(tokenizer), max_length=1024)
    (problem,) = [p for p in error.value.problems if p.field == field]
    assert (problem.source, problem.row) == (str(path), 2)
    assert says in problem.message
    assert f"{path}: row 2: field {field!r}: " in str(error.value)


def test_every_bad_row_of_a_file_is_reported_at_once(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "demos.jsonl", [with_message(3, role="robot"), GOOD, with_arguments("{")])
    with pytest.raises(DatasetValidationError) as error:
        SFTDataset([str(path)], ConversationEncoder(tokenizer), max_length=1024)
    assert [p.row for p in error.value.problems] == [0, 2]
    assert str(error.value).startswith(f"{path}: 2 invalid row(s)")


def test_tools_for_a_template_that_ignores_them_are_refused(tmp_path, tokenizer):
    row = {**GOOD, "tools": [{"type": "function", "function": {"name": "get_price", "parameters": {}}}]}
    path = write_jsonl(tmp_path / "demos.jsonl", [GOOD, row])
    with pytest.raises(DatasetValidationError) as error:
        SFTDataset([str(path)], ConversationEncoder(tokenizer), max_length=1024)
    (problem,) = error.value.problems
    assert problem.row == 1 and "does not render tool schemas" in problem.message


def test_a_row_longer_than_max_length_is_refused_unless_truncated(tmp_path, tokenizer):
    """The tool conversation is 23 prompt + 56 response tokens (30 + 1 + 15 + 9 + 1) = 79."""
    path = write_jsonl(tmp_path / "demos.jsonl", [GOOD])
    encoder = ConversationEncoder(tokenizer)
    assert len(SFTDataset([str(path)], encoder, max_length=79)) == 1
    with pytest.raises(DatasetValidationError) as error:
        SFTDataset([str(path)], encoder, max_length=78)
    (problem,) = error.value.problems
    assert (problem.row, problem.field) == (0, "<length>")
    assert problem.message.startswith("79 tokens, more than sft.max_length=78")

    truncated = SFTDataset([str(path)], encoder, max_length=40, truncation="truncate")
    (example,) = truncated.examples
    assert truncated.truncated_rows == 1 and example.truncated
    assert len(example.prompt_ids) + len(example.response_ids) == 40
    assert example.loss_mask == [1] * 17  # the first 17 tokens of the call


def test_a_row_whose_prompt_fills_max_length_is_refused_even_when_truncating(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "demos.jsonl", [GOOD])
    with pytest.raises(DatasetValidationError) as error:
        SFTDataset([str(path)], ConversationEncoder(tokenizer), max_length=23, truncation="truncate")
    assert "no assistant token left to train on (the prompt alone is 23 tokens)" in error.value.problems[0].message


def test_main_sft_stops_before_loading_the_model(tmp_path, tiny_model, capsys):  # noqa: F811
    path = write_jsonl(tmp_path / "demos.jsonl", [GOOD, with_message(1, role="robot")])
    code = main([f"trainer.policy.model.path={tiny_model}", f"sft.train_data=[{path}]", "trainer.logger=jsonl"])
    assert code == 1
    assert f"Stopped: {path}: 1 invalid row(s)\n  {path}: row 1: field 'messages[1].role'" in capsys.readouterr().err


def test_main_sft_without_data_is_an_invalid_config(tiny_model, capsys):  # noqa: F811
    assert main([f"trainer.policy.model.path={tiny_model}"]) == 2
    assert "sft.train_data is empty" in capsys.readouterr().err
