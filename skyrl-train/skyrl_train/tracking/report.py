"""Run report from a ``metrics.jsonl``: one PNG per `metric_keys.PLOT_SPECS` entry that has data, plus
``summary.md`` and ``summary.json``. Plots whose keys are missing are skipped with a note in the summary.

    python -m skyrl_train.tracking.report <run_dir or metrics.jsonl> [--out DIR]   # default DIR: <run_dir>/report
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from skyrl_train.tracking.backends.jsonl import METRICS_FILE
from skyrl_train.tracking.metric_keys import PLOT_SPECS
from skyrl_train.tracking.metrics_file import read_metrics
from skyrl_train.tracking.plots import draw_plot
from skyrl_train.tracking.summary import render_markdown, summarize


def write_report(metrics_jsonl_path: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Write the plots, ``summary.md`` and ``summary.json`` into ``out_dir``; return the summary data."""
    path = Path(metrics_jsonl_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    history = read_metrics(path)
    keys = history.keys()
    notes = []
    if history.bad_lines:
        notes.append(f"skipped {len(history.bad_lines)} unreadable line(s) of {path.name}: {history.bad_lines}")
    plots = []
    for spec in PLOT_SPECS:
        selected = spec.select(keys)
        if not selected:
            notes.append(f"no `{spec.include}` keys: plot '{spec.name}' skipped")
            continue
        draw_plot(spec, history, selected, out / f"{spec.name}.png")
        plots.append(spec.name)
    summary = summarize(history)
    summary.update(metrics_file=str(path), plots=plots, notes=notes)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(render_markdown(summary, title=str(path.parent.name or path)))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skyrl_train.tracking.report", description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help=f"run folder holding {METRICS_FILE}, or the file itself")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: <run folder>/report)")
    args = parser.parse_args(argv)
    path = args.run / METRICS_FILE if args.run.is_dir() else args.run
    if not path.is_file():
        print(f"error: {path} not found", file=sys.stderr)
        return 2
    out = args.out or path.parent / "report"
    summary = write_report(path, out)
    print(f"report for {summary['steps_run']} steps written to {out} ({len(summary['plots'])} plots)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
