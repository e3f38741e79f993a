"""Row schema checks, reported per file with the row index and field of every problem."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ROLES = ("system", "user", "assistant", "tool")
MAX_REPORTED_ROWS = 20


@dataclass(frozen=True)
class RowProblem:
    source: str
    row: int
    """Index of the row within its file (0-based)."""
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}: row {self.row}: field {self.field!r}: {self.message}"


class DatasetValidationError(ValueError):
    """Every bad row of one file (up to ``MAX_REPORTED_ROWS`` rows), one problem per line."""

    def __init__(self, source: str, problems: list[RowProblem], bad_rows: int):
        self.source = source
        self.problems = problems
        self.bad_rows = bad_rows
        shown = len({p.row for p in problems})
        lines = [f"{source}: {bad_rows} invalid row(s)"] + [f"  {p}" for p in problems]
        if bad_rows > shown:
            lines.append(f"  ... and {bad_rows - shown} more invalid row(s)")
        super().__init__("\n".join(lines))


def validate_rows(source: str, rows: list[Any], prompt_key: str, env_class_key: str) -> None:
    """Raise ``DatasetValidationError`` listing the problems of the first ``MAX_REPORTED_ROWS`` bad rows."""
    problems: list[RowProblem] = []
    bad_rows = 0
    for index, row in enumerate(rows):
        row_problems = [
            RowProblem(source, index, field, message)
            for field, message in _row_problems(row, prompt_key, env_class_key)
        ]
        if row_problems:
            bad_rows += 1
            if bad_rows <= MAX_REPORTED_ROWS:
                problems += row_problems
    if bad_rows:
        raise DatasetValidationError(source, problems, bad_rows)


def _row_problems(row: Any, prompt_key: str, env_class_key: str) -> list[tuple[str, str]]:
    """(field, message) pairs; the field is a path such as ``prompt[1].role``."""
    if not isinstance(row, Mapping):
        return [("<row>", f"expected an object with a {prompt_key!r} field, got {type(row).__name__}")]
    problems = _prompt_problems(row.get(prompt_key), prompt_key) if prompt_key in row else [(prompt_key, "missing")]
    env_class = row.get(env_class_key)
    if env_class is not None and not isinstance(env_class, str):
        problems.append((env_class_key, f"expected a string or null, got {type(env_class).__name__}"))
    for field in ("reward_spec", "extra_info"):
        value = row.get(field)
        if value is not None and not isinstance(value, Mapping):
            problems.append((field, f"expected a mapping (or null), got {type(value).__name__}"))
    return problems


def _prompt_problems(prompt: Any, key: str) -> list[tuple[str, str]]:
    if not isinstance(prompt, list | tuple):
        return [(key, f"expected a list of {{role, content}} messages, got {type(prompt).__name__}")]
    if not prompt:
        return [(key, "empty message list")]
    problems = []
    for i, message in enumerate(prompt):
        where = f"{key}[{i}]"
        if not isinstance(message, Mapping):
            problems.append((where, f"expected a {{role, content}} mapping, got {type(message).__name__}"))
            continue
        role = message.get("role")
        if role not in ROLES:
            problems.append((f"{where}.role", f"expected one of {', '.join(ROLES)}, got {role!r}"))
        if not isinstance(message.get("content"), str):
            content = message.get("content")
            got = "missing" if "content" not in message else type(content).__name__
            problems.append((f"{where}.content", f"expected a string, got {got}"))
    return problems
