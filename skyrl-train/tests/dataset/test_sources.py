"""Reading rows from parquet / json / jsonl files and the Hugging Face branch."""

from __future__ import annotations

import sys
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skyrl_train.dataset import DataSourceError, load_rows


def test_parquet_nested_columns_come_back_as_plain_lists_and_dicts(files):
    path = files.parquet(
        "t.parquet",
        [
            {
                "prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
                "reward_spec": {"method": "rule", "ground_truth": "4"},
                "tags": ["x", "y"],
            }
        ],
    )
    assert load_rows(path) == [
        {
            "prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
            "reward_spec": {"method": "rule", "ground_truth": "4"},
            "tags": ["x", "y"],
        }
    ]


def test_parquet_struct_fields_missing_from_a_row_are_dropped_not_filled_with_none(files):
    rows = [
        {"prompt": [{"role": "user", "content": "q"}], "extra_info": {"a": 1}},
        {
            "prompt": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": "{}"}]},
            ],
            "extra_info": {"b": 2},
        },
    ]
    assert load_rows(files.parquet("t.parquet", rows)) == rows


def test_parquet_null_top_level_column_stays_as_none(files):
    path = files.parquet("t.parquet", [files.row("q", env_class="gsm8k"), files.row("q", env_class=None)])
    assert [row["env_class"] for row in load_rows(path)] == ["gsm8k", None]


def test_parquet_map_column_becomes_a_dict_keeping_null_values(tmp_path):
    table = pa.table(
        {
            "prompt": pa.array([[{"role": "user", "content": "q"}]]),
            "scores": pa.array([[("a", 1), ("b", None)]], type=pa.map_(pa.string(), pa.int64())),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    assert load_rows(str(tmp_path / "t.parquet")) == [
        {"prompt": [{"role": "user", "content": "q"}], "scores": {"a": 1, "b": None}}
    ]


def test_json_array_file(files):
    assert load_rows(files.json("t.json", [{"x": 1}, {"x": 2}])) == [{"x": 1}, {"x": 2}]


def test_json_file_holding_json_lines(files):
    assert load_rows(files.text("t.json", '{"x": 1}\n{"x": 2}\n')) == [{"x": 1}, {"x": 2}]


def test_jsonl_skips_blank_lines_and_keeps_explicit_nulls(files):
    assert load_rows(files.text("t.jsonl", '{"x": 1, "y": null}\n\n{"x": 2}\n')) == [{"x": 1, "y": None}, {"x": 2}]


def test_jsonl_bad_line_error_names_file_and_line(files):
    path = files.text("t.jsonl", '{"x": 1}\n{"x": \n')
    with pytest.raises(DataSourceError, match=r"t\.jsonl: line 2 is not valid JSON"):
        load_rows(path)


def test_missing_local_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        load_rows(str(tmp_path / "nope.parquet"))


def test_home_directory_is_expanded(files, monkeypatch):
    monkeypatch.setenv("HOME", str(files.folder))
    files.jsonl("t.jsonl", [{"x": 1}])
    assert load_rows("~/t.jsonl") == [{"x": 1}]


def test_non_local_name_without_datasets_package_explains_both_options(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    with pytest.raises(DataSourceError) as info:
        load_rows("openai/gsm8k:test")
    message = str(info.value)
    assert "'openai/gsm8k:test' is not a local .parquet/.json/.jsonl file" in message
    assert "needs the `datasets` package" in message
    assert "hub" in message


class _FakeArrowDataset:
    def __init__(self, table: pa.Table):
        self.table = table

    def with_format(self, fmt: str):
        assert fmt == "arrow"
        return self

    def __getitem__(self, key):
        assert key == slice(None)
        return self.table


def _fake_datasets_module(splits: dict[str, pa.Table], calls: list[tuple[str, str]]) -> types.ModuleType:
    """Stands in for the `datasets` package (not installed, and there is no hub access here)."""

    def load_dataset(name: str, split: str):
        calls.append((name, split))
        if split not in splits:
            raise ValueError(f'Unknown split "{split}". Should be one of {list(splits)}.')
        return _FakeArrowDataset(splits[split])

    return types.SimpleNamespace(load_dataset=load_dataset)


def test_hf_name_without_split_loads_train(monkeypatch):
    calls: list[tuple[str, str]] = []
    table = pa.Table.from_pylist([{"prompt": [{"role": "user", "content": "q"}], "extra_info": {"a": 1}}])
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets_module({"train": table}, calls))
    assert load_rows("org/name") == [{"prompt": [{"role": "user", "content": "q"}], "extra_info": {"a": 1}}]
    assert calls == [("org/name", "train")]


def test_hf_name_with_split_passes_the_split(monkeypatch):
    calls: list[tuple[str, str]] = []
    table = pa.Table.from_pylist([{"x": 1}])
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets_module({"test": table}, calls))
    assert load_rows("org/name:test") == [{"x": 1}]
    assert calls == [("org/name", "test")]


def test_hf_unknown_split_raises_value_error_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets_module({"train": pa.table({"x": [1]})}, []))
    with pytest.raises(ValueError, match="Hugging Face dataset 'org/name' has no split 'validation'"):
        load_rows("org/name:validation")
