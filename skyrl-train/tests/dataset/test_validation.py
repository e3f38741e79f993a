"""Row validation: every error names the file, the row index within that file, and the field."""

from __future__ import annotations

import pytest

from skyrl_train.dataset import DatasetValidationError, PromptDataset
from skyrl_train.dataset.validation import MAX_REPORTED_ROWS


def _error(path: str) -> DatasetValidationError:
    with pytest.raises(DatasetValidationError) as info:
        PromptDataset([path], tokenizer=None, max_prompt_length=None)
    return info.value


def _only_problem(path: str) -> str:
    error = _error(path)
    assert len(error.problems) == 1
    return str(error.problems[0])


def test_missing_prompt(files):
    path = files.jsonl("d.jsonl", [files.row("ok"), {"env_class": "gsm8k"}])
    assert _only_problem(path) == f"{path}: row 1: field 'prompt': missing"


def test_prompt_not_a_list(files):
    path = files.jsonl("d.jsonl", [{"prompt": "What is 2+2?"}])
    assert (
        _only_problem(path) == f"{path}: row 0: field 'prompt': expected a list of {{role, content}} messages, got str"
    )


def test_empty_prompt(files):
    path = files.jsonl("d.jsonl", [{"prompt": []}])
    assert _only_problem(path) == f"{path}: row 0: field 'prompt': empty message list"


def test_message_not_a_mapping(files):
    path = files.jsonl("d.jsonl", [{"prompt": ["hello"]}])
    assert _only_problem(path) == f"{path}: row 0: field 'prompt[0]': expected a {{role, content}} mapping, got str"


def test_unknown_role(files):
    path = files.jsonl("d.jsonl", [{"prompt": [{"role": "user", "content": "a"}, {"role": "human", "content": "b"}]}])
    assert _only_problem(path) == (
        f"{path}: row 0: field 'prompt[1].role': expected one of system, user, assistant, tool, got 'human'"
    )


def test_non_string_content(files):
    path = files.jsonl("d.jsonl", [{"prompt": [{"role": "user", "content": ["a", "b"]}]}])
    assert _only_problem(path) == f"{path}: row 0: field 'prompt[0].content': expected a string, got list"


def test_missing_content(files):
    path = files.jsonl("d.jsonl", [{"prompt": [{"role": "user"}]}])
    assert _only_problem(path) == f"{path}: row 0: field 'prompt[0].content': expected a string, got missing"


def test_env_class_not_a_string(files):
    path = files.jsonl("d.jsonl", [files.row("q", env_class=3)])
    assert _only_problem(path) == f"{path}: row 0: field 'env_class': expected a string or null, got int"


def test_reward_spec_not_a_mapping(files):
    path = files.jsonl("d.jsonl", [files.row("q", reward_spec="4")])
    assert _only_problem(path) == f"{path}: row 0: field 'reward_spec': expected a mapping (or null), got str"


def test_extra_info_not_a_mapping(files):
    path = files.jsonl("d.jsonl", [files.row("q", extra_info=[1])])
    assert _only_problem(path) == f"{path}: row 0: field 'extra_info': expected a mapping (or null), got list"


def test_row_not_an_object(files):
    path = files.json("d.json", [files.row("q"), [1, 2]])
    assert _only_problem(path) == f"{path}: row 1: field '<row>': expected an object with a 'prompt' field, got list"


def test_custom_prompt_key_is_the_field_named(files):
    path = files.jsonl("d.jsonl", [files.row("q")])
    with pytest.raises(DatasetValidationError, match=r"row 0: field 'messages': missing"):
        PromptDataset([path], tokenizer=None, max_prompt_length=None, prompt_key="messages")


def test_row_index_counts_within_the_bad_file_not_across_files(files):
    good = files.parquet("good.parquet", [files.row("a"), files.row("b"), files.row("c")])
    bad = files.jsonl("bad.jsonl", [files.row("d"), {"prompt": []}])
    with pytest.raises(DatasetValidationError, match=r"bad\.jsonl: row 1: field 'prompt': empty message list"):
        PromptDataset([good, bad], tokenizer=None, max_prompt_length=None)


def test_all_bad_rows_of_a_file_are_reported_together(files):
    rows = [files.row("ok"), {"prompt": []}, files.row("ok"), files.row("q", env_class=1, reward_spec=2)]
    path = files.jsonl("d.jsonl", rows)
    error = _error(path)
    assert str(error) == "\n".join(
        [
            f"{path}: 2 invalid row(s)",
            f"  {path}: row 1: field 'prompt': empty message list",
            f"  {path}: row 3: field 'env_class': expected a string or null, got int",
            f"  {path}: row 3: field 'reward_spec': expected a mapping (or null), got int",
        ]
    )


def test_reported_rows_are_capped_with_a_count_of_the_rest(files):
    path = files.jsonl("d.jsonl", [{"prompt": []}] * (MAX_REPORTED_ROWS + 3))
    error = _error(path)
    assert MAX_REPORTED_ROWS == 20
    assert [p.row for p in error.problems] == list(range(20))
    assert error.bad_rows == 23
    assert str(error).endswith("... and 3 more invalid row(s)")


def test_null_env_class_reward_spec_and_extra_info_are_valid(files):
    path = files.parquet("d.parquet", [files.row("q", env_class=None, reward_spec=None, extra_info=None)])
    assert len(PromptDataset([path], tokenizer=None, max_prompt_length=None)) == 1


def test_extra_message_keys_are_allowed(files):
    message = {"role": "assistant", "content": "", "tool_calls": [{"name": "f"}]}
    path = files.jsonl("d.jsonl", [{"prompt": [{"role": "user", "content": "q"}, message]}])
    assert len(PromptDataset([path], tokenizer=None, max_prompt_length=None)) == 1
