"""Write MCP dataset rows as ``train``/``validation`` files: a deterministic split, parquet + JSON Lines, atomically.

``write_dataset(tasks, output_dir)`` assigns each task its split from the MD5 hash of its ``task_id`` (so a task
stays in the same split however the dataset grows or is reordered), numbers the rows of each split, validates every
row (``schema.validate_row``) and writes ``<output_dir>/{train,validation}.parquet`` (and ``.jsonl``). Existing
files are never replaced unless ``overwrite=True``; each file is written to a temporary sibling and renamed, so a
reader sees the old file or the complete new one.

Parquet stores the ``params`` of all tool calls as one struct column: a parameter name must have one JSON type
across the dataset (integers and floats mix, being numbers). ``write_dataset`` checks this first and names the
two rows that disagree, instead of letting pyarrow fail with a message that names neither.

``read_rows(path, feature)`` reads a dataset file back as the trainer reads it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from skyrl_gym.common.fs import atomic_write_text, fsync_dir
from skyrl_integrations.datasets.schema import SPLITS, TaskRow, validate_row
from skyrl_integrations.extras import missing_extra

__all__ = [
    "DEFAULT_VAL_RATIO",
    "DatasetWriteError",
    "add_output_arguments",
    "check_output_args",
    "output_paths",
    "read_rows",
    "split_for",
    "split_tasks",
    "write_dataset",
    "write_from_args",
]

DEFAULT_VAL_RATIO = 0.1
FORMATS = ("parquet", "jsonl")


class DatasetWriteError(ValueError):
    """The rows cannot be written: existing output, duplicate ``task_id`` values, or a parameter with two types."""


def split_for(task_id: str, val_ratio: float) -> str:
    """``validation`` when the first 8 bytes of MD5(task_id), read as a fraction in [0, 1), are below ``val_ratio``."""
    digest = hashlib.md5(task_id.encode("utf-8")).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return "validation" if fraction < val_ratio else "train"


def split_tasks(tasks: Iterable[TaskRow], val_ratio: float | None = DEFAULT_VAL_RATIO) -> dict[str, list[TaskRow]]:
    """Copies of ``tasks`` grouped by ``split_for`` (``val_ratio=None``: by each task's own ``split``, e.g. a split
    by entity made by the generator), with ``split`` set and ``index`` numbering each split from 0."""
    if val_ratio is not None and not 0.0 <= val_ratio <= 1.0:
        raise ValueError(f"val_ratio must be in [0, 1], got {val_ratio}")
    groups: dict[str, list[TaskRow]] = {split: [] for split in SPLITS}
    seen: dict[str, int] = {}
    for position, task in enumerate(tasks):
        if task.task_id in seen:
            raise DatasetWriteError(f"duplicate task_id {task.task_id!r} (tasks {seen[task.task_id]} and {position})")
        seen[task.task_id] = position
        split = task.split if val_ratio is None else split_for(task.task_id, val_ratio)
        groups[split].append(replace(task, split=split, index=len(groups[split])))
    return groups


def write_dataset(
    tasks: Iterable[TaskRow],
    output_dir: str | os.PathLike[str],
    *,
    val_ratio: float | None = DEFAULT_VAL_RATIO,
    overwrite: bool = False,
    formats: Sequence[str] = FORMATS,
) -> dict[str, Path]:
    """Split, validate and write ``tasks``; return the written paths keyed by ``"<split>.<format>"``."""
    targets = output_paths(output_dir, overwrite=overwrite, formats=formats)
    out = Path(output_dir)
    groups = split_tasks(tasks, val_ratio)
    rows = {split: [task.to_row() for task in group] for split, group in groups.items()}
    for split, split_rows in rows.items():
        for row in split_rows:
            validate_row(row, where=f"{split} row {row['extra_info']['index']} (task {_task_id(row)!r})")
    _check_param_types([row for split_rows in rows.values() for row in split_rows])
    out.mkdir(parents=True, exist_ok=True)
    schema = _parquet_schema(rows["train"] + rows["validation"]) if "parquet" in formats else None
    for split, split_rows in rows.items():
        if "parquet" in formats:
            _write_parquet_atomic(pa.Table.from_pylist(split_rows, schema=schema), targets[f"{split}.parquet"])
        if "jsonl" in formats:
            text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in split_rows)
            atomic_write_text(targets[f"{split}.jsonl"], text)
    return targets


def read_rows(path: str | os.PathLike[str], feature: str) -> list[dict[str, Any]]:
    """The rows of a dataset file as the trainer reads them (`skyrl_train.dataset.sources.load_rows`: a parquet
    file's null struct fields dropped); `feature`, the caller, is named in the error when skyrl-train is missing."""
    try:
        from skyrl_train.dataset.sources import load_rows
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, "train", feature) from exc
    return load_rows(str(path))


def output_paths(
    output_dir: str | os.PathLike[str], *, overwrite: bool = False, formats: Sequence[str] = FORMATS
) -> dict[str, Path]:
    """The files ``write_dataset`` writes, keyed ``"<split>.<format>"``; ``DatasetWriteError`` if one exists and
    ``overwrite`` is off (generators call this before spending time on generation)."""
    unknown = set(formats) - set(FORMATS)
    if unknown or not formats:
        raise ValueError(f"formats must be a non-empty subset of {FORMATS}, got {list(formats)}")
    out = Path(output_dir)
    targets = {f"{split}.{fmt}": out / f"{split}.{fmt}" for split in SPLITS for fmt in formats}
    existing = [str(p) for p in targets.values() if p.exists()]
    if existing and not overwrite:
        raise DatasetWriteError(f"refusing to overwrite existing {', '.join(existing)} (pass --overwrite)")
    return targets


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """The output flags every generator CLI shares: ``--output-dir``, ``--val-ratio``, ``--overwrite``, ``--no-jsonl``."""
    parser.add_argument("--output-dir", required=True, help="folder for train/validation .parquet and .jsonl files")
    parser.add_argument(
        "--val-ratio",
        type=float,
        default=DEFAULT_VAL_RATIO,
        help=f"fraction of questions (by hash of task_id) that go to validation (default {DEFAULT_VAL_RATIO})",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace existing output files")
    parser.add_argument("--no-jsonl", action="store_true", help="write only the .parquet files")


def check_output_args(args: argparse.Namespace) -> None:
    """``output_paths`` for the flags added by ``add_output_arguments``: fail before generating, not after."""
    output_paths(args.output_dir, overwrite=args.overwrite, formats=_formats(args))


def write_from_args(tasks: Iterable[TaskRow], args: argparse.Namespace) -> dict[str, Path]:
    """``write_dataset`` with the flags added by ``add_output_arguments``."""
    return write_dataset(
        tasks, args.output_dir, val_ratio=args.val_ratio, overwrite=args.overwrite, formats=_formats(args)
    )


def _formats(args: argparse.Namespace) -> tuple[str, ...]:
    return ("parquet",) if args.no_jsonl else FORMATS


def _parquet_schema(rows: list[dict[str, Any]]) -> pa.Schema:
    """The Arrow schema of ``rows``, with field-less structs (``params: {}`` in every row) stored as maps, which
    parquet can hold and which read back as ``{}``."""
    try:
        schema = pa.Table.from_pylist(rows).schema
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DatasetWriteError(f"the rows cannot be stored as one parquet table: {exc}") from None
    return pa.schema([f.with_type(_without_empty_structs(f.type)) for f in schema])


def _without_empty_structs(arrow_type: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(arrow_type):
        if arrow_type.num_fields == 0:
            return pa.map_(pa.string(), pa.string())
        return pa.struct([f.with_type(_without_empty_structs(f.type)) for f in arrow_type])
    if pa.types.is_list(arrow_type):
        return pa.list_(_without_empty_structs(arrow_type.value_type))
    return arrow_type


def _write_parquet_atomic(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def _check_param_types(rows: list[dict[str, Any]]) -> None:
    """Raise ``DatasetWriteError`` when a tool parameter name has two JSON types across ``rows``."""
    first_seen: dict[str, tuple[str, str]] = {}
    for row in rows:
        where = f"{row['extra_info']['split']} row {row['extra_info']['index']} (task {_task_id(row)!r})"
        for step in row["reward_spec"]["ground_truth"]["tool_sequence"]:
            for name, value in step["params"].items():
                if value is None:
                    continue
                kind = _json_kind(value)
                seen = first_seen.setdefault(name, (kind, where))
                if seen[0] != kind:
                    raise DatasetWriteError(
                        f"tool parameter {name!r} is {seen[0]} in {seen[1]} but {kind} in {where}: parquet stores "
                        "all params in one struct column, so a parameter name needs one type across the dataset"
                    )


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


def _task_id(row: dict[str, Any]) -> str:
    return row["reward_spec"]["ground_truth"]["task_id"]
