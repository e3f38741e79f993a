"""Read the rows of one dataset source: a local ``.parquet``, ``.json`` or ``.jsonl`` file, or a Hugging Face dataset.

Rows come back as plain Python values (dicts, lists, str, numbers, None), whatever the storage format.

Nulls in Arrow structs: Arrow gives every row of a struct column every field of the column's unified schema, so a
field that one row never had reads back as None (e.g. ``tool_calls: None`` on each plain message once any message
in the file has tool calls). Parquet cannot tell such a filler from an explicit null, and a filler breaks consumers
that test for presence (a chat template's ``message.tool_calls is defined``, an env's ``"key" in extras``). So for
Arrow-backed sources (parquet, HF datasets) None-valued struct fields are dropped, at every nesting depth. Map
entries (keys stored explicitly) and top-level columns keep their None values: a null top-level column is a real
field of the row (e.g. ``env_class: None`` meaning "use the default env"). JSON rows are kept exactly as written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

LOCAL_SUFFIXES = (".parquet", ".json", ".jsonl")


class DataSourceError(ValueError):
    """A source that cannot be read: malformed JSON, unknown HF split, no ``datasets`` package."""


def load_rows(source: str) -> list[Any]:
    """All rows of ``source`` in file order. Rows are normally dicts; validation reports any that are not."""
    path = Path(source).expanduser()
    suffix = path.suffix.lower()
    if suffix in LOCAL_SUFFIXES:
        if not path.is_file():
            raise FileNotFoundError(f"dataset file {source!r} does not exist (or is not a file)")
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return arrow_to_rows(pq.read_table(path))
        return _read_json(path, source)
    return _load_hf(source)


def arrow_to_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows of an Arrow table as plain Python values: maps become dicts, None struct fields are dropped."""
    rows = table.to_pylist(maps_as_pydicts="strict")
    cleaners = {field.name: field.type for field in table.schema if _has_struct(field.type)}
    for row in rows:
        for name, arrow_type in cleaners.items():
            row[name] = _drop_null_struct_fields(row[name], arrow_type)
    return rows


def _has_struct(arrow_type: pa.DataType) -> bool:
    if pa.types.is_struct(arrow_type):
        return True
    if pa.types.is_map(arrow_type):
        return _has_struct(arrow_type.item_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return _has_struct(arrow_type.value_type)
    return False


def _drop_null_struct_fields(value: Any, arrow_type: pa.DataType) -> Any:
    """Walk ``value`` alongside its Arrow type, removing None-valued fields of structs (see the module docstring)."""
    if value is None or not _has_struct(arrow_type):
        return value
    if pa.types.is_struct(arrow_type):
        fields = {arrow_type.field(i).name: arrow_type.field(i).type for i in range(arrow_type.num_fields)}
        return {k: _drop_null_struct_fields(v, fields[k]) for k, v in value.items() if v is not None}
    if pa.types.is_map(arrow_type):
        return {k: _drop_null_struct_fields(v, arrow_type.item_type) for k, v in value.items()}
    return [_drop_null_struct_fields(v, arrow_type.value_type) for v in value]


def _read_json(path: Path, source: str) -> list[Any]:
    """A ``.json`` file holds either one array of rows or JSON Lines; a ``.jsonl`` file holds JSON Lines."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataSourceError(f"{source}: invalid JSON array: {exc}") from None
    rows = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DataSourceError(f"{source}: line {line_number} is not valid JSON: {exc}") from None
    return rows


def _load_hf(source: str) -> list[dict[str, Any]]:
    """``name`` or ``name:split`` (default split ``train``) through the ``datasets`` package."""
    try:
        import datasets
    except ImportError:
        raise DataSourceError(
            f"{source!r} is not a local .parquet/.json/.jsonl file (cwd {os.getcwd()}). Any other string is read as "
            "a Hugging Face dataset ('name' or 'name:split'), which needs the `datasets` package (pip install "
            "datasets) and access to the hub or its cache."
        ) from None
    name, _, split = source.partition(":")
    split = split or "train"
    try:
        dataset = datasets.load_dataset(name, split=split)
    except ValueError as exc:
        raise DataSourceError(f"Hugging Face dataset {name!r} has no split {split!r}: {exc}") from exc
    return arrow_to_rows(dataset.with_format("arrow")[:])
