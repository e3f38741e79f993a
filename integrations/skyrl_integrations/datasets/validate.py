"""Validate MCP dataset files: ``skyrl-validate-data PATH... [--execute]`` (or ``python -m
skyrl_integrations.datasets.validate``).

For every ``.parquet`` / ``.jsonl`` / ``.json`` file it prints the row count and the counts by ``data_source``,
``complexity`` and split, then lists every problem as ``<file>: row <i>: field '<key>': <message>`` and exits 1 if
there is any. Checks: the row schema (``schema.row_problems``), unique ``task_id`` values within a file, and, for a file
named ``train.*`` or ``validation.*``, that every row's ``extra_info.split`` says so.

``--execute`` also replays each valid row's ``tool_sequence`` on the bundled MCP servers (real processes) and
checks that every call succeeds and that the expected answer is derivable from the results
(``replay.answer_in_results``: a value of a result, or for numbers the sum or difference of two). A call whose
``params`` leave out a required argument (generators may omit free-text ones, such as a search query, that any
wording satisfies) is not replayed; the answer of such a row is not checked, and the report counts those rows.

Files are read with skyrl-train's dataset reader, as training reads them: this module needs the ``train`` extra
(``pip install 'skyrl-integrations-toolfork[train]'``).
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
from skyrl_integrations.extras import missing_extra
from skyrl_integrations.mcp.servers import BUNDLED_SERVERS

try:  # the trainer's own reader, so a file that validates here reads the same in training
    from skyrl_train.dataset.sources import DataSourceError, load_rows
    from skyrl_train.dataset.validation import RowProblem
except ModuleNotFoundError as exc:
    raise missing_extra(exc, "train", "skyrl_integrations.datasets.validate (skyrl-validate-data)") from exc

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
    replayed: int = 0
    """Rows replayed by ``--execute``."""
    unchecked: int = 0
    """Replayed rows whose answer could not be checked: some step's params leave out a required argument."""

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
            problems, checked = _replay(task, servers)
            report.problems += [RowProblem(path, index, key, message) for key, message in problems]
            report.replayed += 1
            report.unchecked += not checked and not problems
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


def _replay(task: TaskRow, servers: ToolServers) -> tuple[list[tuple[str, str]], bool]:
    """(key, message) problems of replaying the row, and whether its answer was checked: a step whose params
    leave out a required (free-text) argument is not replayed, and then the answer cannot be checked."""
    key = "reward_spec.ground_truth.tool_sequence"
    for i, step in enumerate(task.tool_sequence):
        if step.server not in servers.specs:
            bundled = ", ".join(sorted(BUNDLED_SERVERS))
            message = f"{step.server!r} is not a bundled server; --execute replays bundled servers only ({bundled})"
            return [(f"{key}[{i}].server", message)], False
    texts, complete = [], True
    for i, step in enumerate(task.tool_sequence):
        if servers.missing_arguments(step):
            complete = False
            continue
        (result,) = servers.run([step])
        if result.is_error:
            message = f"{step.tool} failed on replay ({result.error_kind}): {result.text[:300]}"
            return [(f"{key}[{i}]", message)], False
        texts.append(result.text)
    if complete and not answer_in_results(task.expected_answer, task.answer_match, texts):
        message = f"{task.expected_answer!r} ({task.answer_match}) is not derivable from the replayed results"
        return [("reward_spec.ground_truth.success.expected_answer", message)], True
    return [], complete


def format_report(report: FileReport) -> str:
    status = "OK" if report.ok else f"{len({p.row for p in report.problems})} invalid row(s)"
    lines = [f"{report.path}: {report.rows} row(s), {status}"]
    for name, counter in report.counts.items():
        if counter:
            lines.append(f"  {name}: " + ", ".join(f"{value} {count}" for value, count in sorted(counter.items())))
    if report.replayed:
        line = f"  execute: {report.replayed} row(s) replayed"
        if report.unchecked:
            line += (
                f"; {report.unchecked} with calls whose params leave out required (free-text) arguments: those calls "
                "were skipped and the answer was not checked"
            )
        lines.append(line)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_integrations.datasets.validate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("paths", nargs="+", help="dataset files (.parquet, .jsonl, .json)")
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
