"""Writing task rows: hash split, parquet + JSON Lines, overwrite protection, parquet type pitfalls."""

from __future__ import annotations

import pytest

from skyrl_integrations.datasets.io import DatasetWriteError, split_for, split_tasks, write_dataset
from skyrl_integrations.datasets.schema import ToolStep, validate_row
from skyrl_train.dataset.sources import load_rows

IDS = ["market-0001", "market-0002", "market-0003", "market-0004", "search-0001", "slack-0001"]


def test_split_is_the_md5_fraction_of_the_task_id():
    # MD5 fractions: market-0001 0.933, market-0002 0.906, market-0003 0.438, market-0004 0.489,
    # search-0001 0.569, slack-0001 0.302
    assert [split_for(t, 0.5) for t in IDS] == ["train", "train", "validation", "validation", "train", "validation"]


def test_split_tasks_numbers_each_split_from_zero(make_task):
    groups = split_tasks([make_task(t) for t in IDS], val_ratio=0.5)
    assert [(t.task_id, t.index) for t in groups["train"]] == [
        ("market-0001", 0),
        ("market-0002", 1),
        ("search-0001", 2),
    ]
    assert [(t.task_id, t.index) for t in groups["validation"]] == [
        ("market-0003", 0),
        ("market-0004", 1),
        ("slack-0001", 2),
    ]
    assert {t.split for t in groups["validation"]} == {"validation"}


def test_without_a_val_ratio_each_task_keeps_its_own_split(make_task):
    tasks = [make_task("market-0001", split="validation"), make_task("market-0002"), make_task("market-0003")]
    groups = split_tasks(tasks, val_ratio=None)
    assert {split: [(t.task_id, t.index) for t in group] for split, group in groups.items()} == {
        "train": [("market-0002", 0), ("market-0003", 1)],
        "validation": [("market-0001", 0)],
    }


def test_duplicate_task_ids_are_refused(make_task):
    with pytest.raises(DatasetWriteError, match=r"duplicate task_id 'market-0001' \(tasks 0 and 2\)"):
        split_tasks([make_task("market-0001"), make_task("market-0002"), make_task("market-0001")])


def test_write_dataset_writes_parquet_and_jsonl_that_read_back_as_the_same_rows(make_task, tmp_path):
    tasks = [make_task(t) for t in IDS]
    paths = write_dataset(tasks, tmp_path / "out", val_ratio=0.5)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "train.jsonl",
        "train.parquet",
        "validation.jsonl",
        "validation.parquet",
    ]
    parquet_rows = load_rows(str(paths["validation.parquet"]))
    assert parquet_rows == load_rows(str(paths["validation.jsonl"]))
    parsed = [validate_row(row) for row in parquet_rows]
    assert [(t.task_id, t.split, t.index) for t in parsed] == [
        ("market-0003", "validation", 0),
        ("market-0004", "validation", 1),
        ("slack-0001", "validation", 2),
    ]


def test_existing_output_is_not_overwritten(make_task, tmp_path):
    write_dataset([make_task()], tmp_path)
    with pytest.raises(DatasetWriteError, match="refusing to overwrite existing .*train.parquet.*--overwrite"):
        write_dataset([make_task("market-0002")], tmp_path)
    assert [validate_row(r).task_id for r in load_rows(str(tmp_path / "train.jsonl"))] == ["market-0001"]


def test_overwrite_replaces_the_files(make_task, tmp_path):
    write_dataset([make_task()], tmp_path)
    write_dataset([make_task("market-0002")], tmp_path, overwrite=True)
    assert [validate_row(r).task_id for r in load_rows(str(tmp_path / "train.parquet"))] == ["market-0002"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_parquet_only(make_task, tmp_path):
    write_dataset([make_task()], tmp_path, formats=["parquet"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.parquet", "validation.parquet"]


def test_empty_validation_split_is_a_readable_file(make_task, tmp_path):
    write_dataset([make_task()], tmp_path, val_ratio=0.0)
    assert load_rows(str(tmp_path / "validation.parquet")) == []


def test_a_parameter_with_two_types_is_refused_naming_both_rows(make_task, tmp_path):
    as_int = make_task("market-0001", tool_sequence=[ToolStep(1, "market", "get_news", {"limit": 5})])
    as_str = make_task("market-0002", tool_sequence=[ToolStep(1, "market", "get_news", {"limit": "5"})])
    with pytest.raises(DatasetWriteError) as info:
        write_dataset([as_int, as_str], tmp_path, val_ratio=0.0)
    assert str(info.value).startswith(
        "tool parameter 'limit' is number in train row 0 (task 'market-0001') but string in train row 1 "
        "(task 'market-0002')"
    )
    assert list(tmp_path.iterdir()) == []


def test_tools_without_parameters_round_trip_through_parquet(make_task, tmp_path):
    task = make_task(tool_sequence=[ToolStep(1, "slack", "list_channels", {})], data_source=None)
    write_dataset([task], tmp_path, val_ratio=0.0)
    (row,) = load_rows(str(tmp_path / "train.parquet"))
    assert row["reward_spec"]["ground_truth"]["tool_sequence"] == [
        {"step": 1, "server": "slack", "tool": "list_channels", "params": {}}
    ]


def test_invalid_task_is_refused_before_writing(make_task, tmp_path):
    with pytest.raises(ValueError, match="key 'reward_spec.ground_truth.success.answer_match'"):
        write_dataset([make_task(answer_match="fuzzy")], tmp_path)
    assert list(tmp_path.iterdir()) == []
