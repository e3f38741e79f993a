"""Shared fixtures: a writer of real dataset files in tmp_path, and the tiny model's (SmolLM2) tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401


class DataFiles:
    """Writes dataset files under one folder and returns their paths as strings."""

    def __init__(self, folder: Path):
        self.folder = folder

    @staticmethod
    def row(content: str, **columns: Any) -> dict[str, Any]:
        """A minimal valid row: one user message with ``content``, plus ``columns``."""
        return {"prompt": [{"role": "user", "content": content}], **columns}

    def parquet(self, name: str, rows: list[dict[str, Any]]) -> str:
        pq.write_table(pa.Table.from_pylist(rows), self.folder / name)
        return str(self.folder / name)

    def jsonl(self, name: str, rows: list[Any]) -> str:
        return self.text(name, "".join(json.dumps(row) + "\n" for row in rows))

    def json(self, name: str, rows: list[Any]) -> str:
        return self.text(name, json.dumps(rows))

    def text(self, name: str, text: str) -> str:
        (self.folder / name).write_text(text, encoding="utf-8")
        return str(self.folder / name)


@pytest.fixture
def files(tmp_path: Path) -> DataFiles:
    return DataFiles(tmp_path)


@pytest.fixture
def three_files(files: DataFiles) -> list[str]:
    """a.parquet (2 rows), b.json (1 row), c.jsonl (2 rows); each row's content names its file and row."""
    return [
        files.parquet("a.parquet", [files.row("a0"), files.row("a1")]),
        files.json("b.json", [files.row("b0")]),
        files.jsonl("c.jsonl", [files.row("c0"), files.row("c1")]),
    ]
