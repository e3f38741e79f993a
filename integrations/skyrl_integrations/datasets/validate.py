"""Validate MCP task files: ``python -m skyrl_integrations.datasets.validate PATH... [--execute]``.

For every ``.parquet`` / ``.jsonl`` / ``.json`` file it prints the row count and the counts by ``data_source``,
``complexity`` and split, then lists every problem as ``<file>: row <i>: field '<key>': <message>`` and exits 1 if
there is any. Checks: the row schema (``schema.row_problems``), unique task ids within a file, and, for a file
named ``train.*`` or ``validation.*``, that every row's ``extra_info.split`` says so.

``--execute`` also replays each valid row's ``tool_sequence`` on the bundled MCP servers (real processes) and
checks that every call succeeds and that the expected answer is derivable: it matches (by the row's
``answer_match``) a value in one of the replayed results.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyrl_integrations.datasets.replay import ToolServers, answer_in_results
from skyrl_integrations.datasets.schema import SPLITS, TaskRow, row_problems
from skyrl_integrations.mcp.servers import BUNDLED_SERVERS
from skyrl_train.dataset.sources import DataSourceError, load_rows
from skyrl_train.dataset.validation import RowProblem

__all__ = ["FileReport", "main", "validate_file", "validate_files"]

FILE_LEVEL = -1
"""``RowProblem.row`` of a problem with the whole file (unreadable, missing)."""


@dataclass
class FileReport:
    path: str
    rows: int = 0
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    """``data_source`` / ``complexity`` / ``split`` → value → number of rows."""
    problems: list[RowProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def validate_files(paths: Sequence[str], *, execute: bool = False) -> list[FileReport]:
    """One report per path; ``execute`` replays the valid rows on the bundled servers (one set for all files)."""
    if not execute:
        return [validate_file(path) for path in paths]
    with ToolServers.bundled(BUNDLED_SERVERS) as servers:  # each server starts when a row first needs it
        return [validate_file(path, servers=servers) for path in paths]


def validate_file(path: str, servers: ToolServers | None = None) -> FileReport:
    """Check one file; with ``servers`` also replay its valid rows (a step on a non-bundled server is a problem)."""
    report = FileReport(path)
    try:
        rows = load_rows(path)
    except (OSError, DataSourceError) as exc:
        report.problems.append(RowProblem(path, FILE_LEVEL, "<file>", str(exc)))
        return report
    report.rows = len(rows)
    report.counts = {"data_source": Counter(), "complexity": Counter(), "split": Counter()}
    expected_split = Path(path).name.split(".")[0]
    seen_ids: dict[str, int] = {}
    for index, row in enumerate(rows):
        problems = row_problems(row)
        report.problems += [RowProblem(path, index, key, message) for key, message in problems]
        if not isinstance(row, dict):
            continue
        for name, value in _row_labels(row).items():
            report.counts[name][str(value)] += 1
        if problems:
            continue
        task = TaskRow.from_row(row, where=f"{path}: row {index}")
        if task.task_id in seen_ids:
            message = f"duplicate task_id {task.task_id!r} (also row {seen_ids[task.task_id]})"
            report.problems.append(RowProblem(path, index, "reward_spec.ground_truth.task_id", message))
        seen_ids.setdefault(task.task_id, index)
        if expected_split in SPLITS and task.split != expected_split:
            message = f"row of split {task.split!r} in a {expected_split!r} file"
            report.problems.append(RowProblem(path, index, "extra_info.split", message))
        if servers is not None:
            report.problems += [RowProblem(path, index, key, message) for key, message in _replay(task, servers)]
    return report


def _row_labels(row: dict[str, Any]) -> dict[str, Any]:
    spec = row.get("reward_spec")
    truth = spec.get("ground_truth") if isinstance(spec, dict) else None
    info = row.get("extra_info")
    return {
        "data_source": row.get("data_source"),
        "complexity": truth.get("complexity") if isinstance(truth, dict) else None,
        "split": info.get("split") if isinstance(info, dict) else None,
    }


def _replay(task: TaskRow, servers: ToolServers) -> list[tuple[str, str]]:
    """(key, message) problems of running the task's tool sequence and looking for its answer in the results."""
    key = "reward_spec.ground_truth.tool_sequence"
    for i, step in enumerate(task.tool_sequence):
        if step.server not in servers.specs:
            bundled = ", ".join(sorted(BUNDLED_SERVERS))
            message = f"{step.server!r} is not a bundled server; --execute replays bundled servers only ({bundled})"
            return [(f"{key}[{i}].server", message)]
    results = servers.run(task.tool_sequence)
    if results and results[-1].is_error:
        i = len(results) - 1
        return [
            (
                f"{key}[{i}]",
                f"{task.tool_sequence[i].tool} failed on replay ({results[-1].error_kind}): "
                f"{results[-1].text[:300]}",
            )
        ]
    if not answer_in_results(task.expected_answer, task.answer_match, [r.text for r in results]):
        return [
            (
                "reward_spec.ground_truth.success.expected_answer",
                f"{task.expected_answer!r} ({task.answer_match}) is not derivable from the replayed results",
            )
        ]
    return []


def format_report(report: FileReport) -> str:
    status = "OK" if report.ok else f"{len({p.row for p in report.problems})} invalid row(s)"
    lines = [f"{report.path}: {report.rows} row(s), {status}"]
    for name, counter in report.counts.items():
        if counter:
            lines.append(f"  {name}: " + ", ".join(f"{value} {count}" for value, count in sorted(counter.items())))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="task files (.parquet, .jsonl, .json)")
    parser.add_argument(
        "--execute", action="store_true", help="replay every tool_sequence on the bundled MCP servers and check answers"
    )
    args = parser.parse_args(argv)
    reports = validate_files(args.paths, execute=args.execute)
    for report in reports:
        print(format_report(report))
    problems = [problem for report in reports for problem in report.problems]
    if problems:
        print(f"\n{len(problems)} problem(s):")
        for problem in problems:
            print(f"  {problem}" if problem.row != FILE_LEVEL else f"  {problem.source}: {problem.message}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
