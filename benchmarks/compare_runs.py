"""Compare two output folders of examples/mcp/run_grpo.sh (its OUT), step by step, bit for bit.

    .venv/bin/python benchmarks/compare_runs.py <OUT_a> <OUT_b> [--max-rows N]

Compared exactly, as the files hold them (1 and 1.0 are equal, and NaN equals NaN):
- the generated data (`data/train.jsonl`, `data/validation.jsonl`), row by row;
- every metric in `exports/metrics.jsonl` (reward, loss, kl, grad norm, pass rates, response lengths, eval results per
  template ...) but timing, memory and throughput figures (`TIMING_KEY`) and the engine-vs-trainer logprob gap
  (`BATCHING_KEY`), per step, as `skyrl_train.tracking.metrics_file` reads them (a step's lines merged, the later
  value winning; strings left out); a key logged by one run only is a difference;
- the exported policy of every step (`exports/global_step_<N>/**`, file by file; a differing safetensors file is
  read to say which tensors differ and by how much); a step exported by one run only is a difference;
- every eval dump (`exports/dumped_evals/global_step_<N>_evals/<data_source>.jsonl` and `aggregated_results.jsonl`),
  row by row: response, score, stop reason, messages, tool calls, env metrics (timing keys left out at any depth) ...

Prints the differences in the order they arose (data first, then by step: metrics, exports, then evals), where the
first differing eval trajectory's text parts, and the figures not compared side by side. Exit 0 when nothing compared
differs, 1 when something does, 2 when a folder cannot be read (a missing metrics file, a line that is not JSON ...).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from skyrl_train.tracking.metrics_file import read_metrics

TIMING_KEY = re.compile(
    r"(^|/)(timing|memory|perf)/|timestamp|tokens_per_s|tok_per_s|throughput|seconds|elapsed|duration|latency|_time$"
    r"|(^|/)time(/|$)|_rss|rss_gb"
)
"""Keys of figures that depend on the machine's speed or memory, never on what was learned."""

BATCHING_KEY = re.compile(r"rollout_train_logprobs_abs_diff")
"""Keys of figures that differ between two runs of the same code with the same seed: the gap between the engine's
logprobs and the trainer's depends in its last bits on which rows the engine batched together (thread timing), which
per-request seeds do not fix (generators/sampling_seeds.py, "What this does not cover"). Measured in two runs of the
same code and seed: 7.76e-07 vs 7.65e-07 at step 1, with every token, metric and weight the same. A token such noise
flipped would show in the compared metrics, dumps and weights."""

DATA_FILES = ("data/train.jsonl", "data/validation.jsonl")
METRICS_FILE = "exports/metrics.jsonl"
EVAL_DUMPS = "exports/dumped_evals"
AGGREGATE_FILE = "aggregated_results.jsonl"
EVAL_DIR = re.compile(r"global_step_(\d+)_evals")
EXPORT_DIR = re.compile(r"global_step_(\d+)")
ABSENT = "(absent)"
"""Shown for the value of a key that one side does not have."""
WHERE_ORDER = {"data": 0, "metric": 1, "export": 2, "eval-aggregate": 3, "eval-file": 4, "eval-row": 5}
"""Order of the kinds of difference within a step, as they arise in a step."""

Rows = list[dict[str, Any]]
EvalDumps = dict[int, dict[str, Rows]]
"""step -> dump file name -> rows."""
RowPair = tuple[int, str, dict[str, Any], dict[str, Any]]
"""A differing eval trajectory: step, `row_label`, a's row, b's row."""


class RunFolderError(Exception):
    """An output folder that cannot be read as one (names the file and line)."""


@dataclass
class Difference:
    step: int  # -1: the data, before any step
    where: str  # a key of WHERE_ORDER
    key: str
    a: Any
    b: Any


@dataclass
class RunFolder:
    path: Path
    data: dict[str, Rows | None]  # DATA_FILES entry -> rows, None where the file is missing
    metrics: dict[int, dict[str, float]]
    evals: EvalDumps
    exports: dict[int, dict[str, Path]]  # step -> path inside the step's export folder -> file


def is_uncompared(key: str) -> bool:
    return TIMING_KEY.search(key) is not None or BATCHING_KEY.search(key) is not None


def read_jsonl(path: Path) -> Rows:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise RunFolderError(f"{path}:{number}: not JSON ({error})") from error
    return rows


def read_data(outdir: Path) -> dict[str, Rows | None]:
    return {name: read_jsonl(outdir / name) if (outdir / name).is_file() else None for name in DATA_FILES}


def read_metrics_by_step(outdir: Path) -> dict[int, dict[str, float]]:
    path = outdir / METRICS_FILE
    if not path.is_file():
        raise RunFolderError(f"no {METRICS_FILE} under {outdir}")
    history = read_metrics(path)
    if history.bad_lines:
        raise RunFolderError(f"{path}: lines {history.bad_lines} are not JSON objects with an integer 'step'")
    return history.steps


def read_eval_dumps(outdir: Path) -> EvalDumps:
    root = outdir / EVAL_DUMPS
    folders = sorted(root.iterdir()) if root.is_dir() else []
    return {
        int(match.group(1)): {f.name: read_jsonl(f) for f in sorted(folder.glob("*.jsonl"))}
        for folder in folders
        if (match := EVAL_DIR.fullmatch(folder.name)) is not None
    }


def read_exported_files(outdir: Path) -> dict[int, dict[str, Path]]:
    root = outdir / "exports"
    folders = sorted(root.iterdir()) if root.is_dir() else []
    return {
        int(match.group(1)): {str(f.relative_to(folder)): f for f in sorted(folder.rglob("*")) if f.is_file()}
        for folder in folders
        if (match := EXPORT_DIR.fullmatch(folder.name)) is not None and folder.is_dir()
    }


def load_run(outdir: Path) -> RunFolder:
    return RunFolder(
        outdir, read_data(outdir), read_metrics_by_step(outdir), read_eval_dumps(outdir), read_exported_files(outdir)
    )


def same(a: Any, b: Any) -> bool:
    """Exact equality of two JSON values, at any depth (1 == 1.0); NaN equals NaN."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def without_uncompared(value: Any) -> Any:
    """`value` with the keys `is_uncompared` names dropped from every dict inside it."""
    if isinstance(value, dict):
        return {k: without_uncompared(v) for k, v in value.items() if not is_uncompared(str(k))}
    if isinstance(value, list):
        return [without_uncompared(v) for v in value]
    return value


def key_differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, a's value, b's value) for each key whose values differ, `ABSENT` for a key one side lacks."""
    return [
        (key, a.get(key, ABSENT), b.get(key, ABSENT))
        for key in sorted(set(a) | set(b))
        if key not in a or key not in b or not same(a[key], b[key])
    ]


def compare_data(a: RunFolder, b: RunFolder) -> list[Difference]:
    diffs = []
    for name in DATA_FILES:
        rows_a, rows_b = a.data[name], b.data[name]
        if rows_a is None or rows_b is None:
            if (rows_a is None) != (rows_b is None):
                diffs.append(Difference(-1, "data", f"{name} (file exists)", rows_a is not None, rows_b is not None))
            continue
        if len(rows_a) != len(rows_b):
            diffs.append(Difference(-1, "data", f"{name} rows", len(rows_a), len(rows_b)))
        # The row counts were compared just above: the rows both files have are compared.
        for i, (row_a, row_b) in enumerate(zip(rows_a, rows_b, strict=False)):
            for key, value_a, value_b in key_differences(row_a, row_b):
                diffs.append(Difference(-1, "data", f"{name} row {i} {key}", value_a, value_b))
    return diffs


def compare_metrics(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]]) -> list[Difference]:
    diffs = []
    for step in sorted(set(a) | set(b)):
        if step not in a or step not in b:
            diffs.append(Difference(step, "metric", "(step logged)", step in a, step in b))
            continue
        for key, value_a, value_b in key_differences(without_uncompared(a[step]), without_uncompared(b[step])):
            diffs.append(Difference(step, "metric", key, value_a, value_b))
    return diffs


def row_label(file_name: str, index: int, row: dict[str, Any]) -> str:
    """`<data source>[<instance>_<repetition>]`, or `<data source>[#<row index>]` for a row without a trajectory id."""
    tid = row.get("trajectory_id") or {}
    ident = f"{tid.get('instance_id')}_{tid.get('repetition_id')}" if tid else f"#{index}"
    return f"{file_name.removesuffix('.jsonl')}[{ident}]"


def compare_eval_file(step: int, name: str, rows_a: Rows, rows_b: Rows) -> tuple[list[Difference], list[RowPair]]:
    """The differences of one dump file, and its differing trajectory row pairs (step, label, row a, row b)."""
    diffs, differing_rows = [], []
    if len(rows_a) != len(rows_b):
        diffs.append(Difference(step, "eval-file", f"{name} rows", len(rows_a), len(rows_b)))
    # The row counts were compared just above: the rows both files have are compared.
    for i, (row_a, row_b) in enumerate(zip(rows_a, rows_b, strict=False)):
        row_diffs = key_differences(without_uncompared(row_a), without_uncompared(row_b))
        if name == AGGREGATE_FILE:
            diffs += [Difference(step, "eval-aggregate", key, va, vb) for key, va, vb in row_diffs]
        elif row_diffs:
            label = row_label(name, i, row_a)
            differing_rows.append((step, label, row_a, row_b))
            diffs += [Difference(step, "eval-row", f"{label}.{key}", va, vb) for key, va, vb in row_diffs]
    return diffs, differing_rows


def compare_evals(a: EvalDumps, b: EvalDumps) -> tuple[list[Difference], list[RowPair]]:
    """The differences, and the differing trajectory row pairs (for showing where a trajectory's text parts)."""
    diffs, differing_rows = [], []
    for step in sorted(set(a) | set(b)):
        if step not in a or step not in b:
            diffs.append(Difference(step, "eval-file", "(eval dumped)", step in a, step in b))
            continue
        for name in sorted(set(a[step]) | set(b[step])):
            if name not in a[step] or name not in b[step]:
                diffs.append(Difference(step, "eval-file", name, name in a[step], name in b[step]))
                continue
            file_diffs, file_rows = compare_eval_file(step, name, a[step][name], b[step][name])
            diffs += file_diffs
            differing_rows += file_rows
    return diffs, differing_rows


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except SafetensorError as error:
        raise RunFolderError(f"{path}: not a readable safetensors file ({error})") from error


def tensor_differences(a: Path, b: Path) -> list[tuple[str, Any, Any]]:
    """(tensor name, a, b) for each tensor of two safetensors files that differs in its bits: its max abs difference
    beside its max abs value, or what differs about its presence, shape or dtype."""
    tensors_a, tensors_b = load_tensors(a), load_tensors(b)
    diffs = []
    for name in sorted(set(tensors_a) | set(tensors_b)):
        ta, tb = tensors_a.get(name), tensors_b.get(name)
        if ta is None or tb is None or ta.shape != tb.shape or ta.dtype != tb.dtype:
            diffs.append((name, *(ABSENT if t is None else f"{t.dtype}{list(t.shape)}" for t in (ta, tb))))
        elif not torch.equal(ta.reshape(-1).view(torch.uint8), tb.reshape(-1).view(torch.uint8)):
            delta = (ta.double() - tb.double()).abs().max().item()
            diffs.append((name, f"max|a-b|={delta:.3g}", f"max|a|={ta.double().abs().max().item():.3g}"))
    return diffs


def compare_exports(a: dict[int, dict[str, Path]], b: dict[int, dict[str, Path]]) -> list[Difference]:
    diffs = []
    for step in sorted(set(a) | set(b)):
        if step not in a or step not in b:
            diffs.append(Difference(step, "export", "(policy exported)", step in a, step in b))
            continue
        for name in sorted(set(a[step]) | set(b[step])):
            if name not in a[step] or name not in b[step]:
                diffs.append(Difference(step, "export", name, name in a[step], name in b[step]))
            elif not filecmp.cmp(a[step][name], b[step][name], shallow=False):
                diffs += file_differences(step, name, a[step][name], b[step][name])
    return diffs


def file_differences(step: int, name: str, a: Path, b: Path) -> list[Difference]:
    """The differences of two exported files whose bytes differ: per tensor for safetensors files whose tensors
    differ, else the file's bytes (for safetensors: the header's metadata or layout)."""
    tensors = tensor_differences(a, b) if name.endswith(".safetensors") else []
    if tensors:
        return [
            Difference(step, "export", f"{name}:{tensor}", value_a, value_b) for tensor, value_a, value_b in tensors
        ]
    return [Difference(step, "export", name, "(bytes differ)", "(bytes differ)")]


def compare(a: RunFolder, b: RunFolder) -> tuple[list[Difference], list[RowPair]]:
    """All differences in the order they arose (data, then per step by `WHERE_ORDER`), and the differing eval
    trajectory row pairs."""
    eval_diffs, differing_rows = compare_evals(a.evals, b.evals)
    diffs = compare_data(a, b) + compare_metrics(a.metrics, b.metrics) + compare_exports(a.exports, b.exports)
    return sorted(diffs + eval_diffs, key=lambda d: (d.step, WHERE_ORDER[d.where])), differing_rows


def number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def fmt(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 3] + "..."


def uncompared_table(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]]) -> list[str]:
    lines = []
    for step in sorted(set(a) & set(b)):
        for key in sorted(k for k in set(a[step]) | set(b[step]) if is_uncompared(k)):
            value_a, value_b = (m[step].get(key) for m in (a, b))
            lines.append(f"  step {step:>3}  {key:<52} {number(value_a):>12} {number(value_b):>12}")
    return lines


def text_divergence(a: str, b: str, context: int = 80) -> str:
    # Texts of different lengths are expected: the first differing character within the shorter one, else its end.
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    shared = a[max(0, n - context) : n].replace("\n", "\\n")
    return (
        f"    common prefix: {n} chars, ...{shared}\n"
        f"    a continues:   {a[n : n + context]!r}\n"
        f"    b continues:   {b[n : n + context]!r}"
    )


def print_summary(a: RunFolder, b: RunFolder) -> None:
    steps = sorted(set(a.metrics) & set(b.metrics))
    n_metrics = sum(1 for s in steps for k in a.metrics[s] if not is_uncompared(k))
    evals = sorted(set(a.evals) & set(b.evals))
    n_eval_rows = sum(len(rows) for dump in a.evals.values() for name, rows in dump.items() if name != AGGREGATE_FILE)
    print(f"a: {a.path}\nb: {b.path}")
    print(
        f"compared: {len(steps)} logged steps {steps}, {n_metrics} compared metric values, {len(evals)} evals {evals}, "
        f"{n_eval_rows} eval rows, exported policies of steps {sorted(set(a.exports) & set(b.exports))}"
    )
    print("\ntiming, memory and engine-batching figures (not compared; see TIMING_KEY, BATCHING_KEY):")
    print(f"  {'':<9} {'key':<52} {'a':>12} {'b':>12}")
    print("\n".join(uncompared_table(a.metrics, b.metrics)) or "  (none)")


def print_differences(diffs: list[Difference], differing_rows: list[RowPair], max_rows: int) -> None:
    first = diffs[0]
    print(f"\ndifferences: {len(diffs)}; the first at step {first.step} ({first.where}): {first.key}")
    print(f"\n  {'step':>4}  {'where':<14} {'key':<60} {'a':<40} {'b':<40}")
    for d in diffs[:max_rows]:
        print(f"  {d.step:>4}  {d.where:<14} {fmt(d.key):<60} {fmt(d.a, 40):<40} {fmt(d.b, 40):<40}")
    if len(diffs) > max_rows:
        print(f"  ... {len(diffs) - max_rows} more (--max-rows)")
    if differing_rows:
        step, label, row_a, row_b = differing_rows[0]
        print(f"\nfirst differing eval trajectory: step {step} {label}")
        print(text_divergence(str(row_a.get("output_response")), str(row_b.get("output_response"))))
        print(f"    final message a: {fmt((row_a.get('messages') or [{}])[-1].get('content'), 120)}")
        print(f"    final message b: {fmt((row_b.get('messages') or [{}])[-1].get('content'), 120)}")
        print(f"    (differing eval trajectories: {len(differing_rows)})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="first run's output folder (OUT of examples/mcp/run_grpo.sh)")
    parser.add_argument("b", type=Path, help="second run's output folder")
    parser.add_argument("--max-rows", type=int, default=40, help="differences printed (default 40)")
    args = parser.parse_args(argv)

    try:
        run_a, run_b = load_run(args.a), load_run(args.b)
        diffs, differing_rows = compare(run_a, run_b)
    except RunFolderError as error:
        print(f"compare_runs: {error}", file=sys.stderr)
        return 2
    print_summary(run_a, run_b)
    if not diffs:
        print(
            f"\nidentical over {len(set(run_a.metrics) & set(run_b.metrics))} steps and "
            f"{len(set(run_a.evals) & set(run_b.evals))} evals"
        )
        return 0
    print_differences(diffs, differing_rows, args.max_rows)
    return 1


if __name__ == "__main__":
    sys.exit(main())
