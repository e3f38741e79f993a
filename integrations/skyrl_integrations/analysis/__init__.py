"""Eval-trajectory analysis: read a run's eval dumps and report success, turns, tool calls and failure categories.

Command line: ``skyrl-analyze-evals LOCATION [--step A --step B] [--json out.json] [--html out.html]``.
From Python::

    from skyrl_integrations.analysis import analyze, format_text, load_eval_dumps

    summary = analyze(load_eval_dumps("~/exports/dumped_evals"))
    print(format_text(summary))

The metric definitions are in `skyrl_integrations.analysis.metrics`, the failure-category rules in
`skyrl_integrations.analysis.categories`, the dump layouts and row fields in `skyrl_integrations.analysis.dumps`.
"""

from skyrl_integrations.analysis.categories import CATEGORIES, Finding, classify
from skyrl_integrations.analysis.dumps import DumpedTrajectory, DumpError, load_eval_dumps, read_trajectories
from skyrl_integrations.analysis.metrics import analyze, pass_at_k, summarize, summarize_step
from skyrl_integrations.analysis.report import format_html, format_text

__all__ = [
    "CATEGORIES",
    "DumpError",
    "DumpedTrajectory",
    "Finding",
    "analyze",
    "classify",
    "format_html",
    "format_text",
    "load_eval_dumps",
    "pass_at_k",
    "read_trajectories",
    "summarize",
    "summarize_step",
]
