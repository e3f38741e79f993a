"""Render an `analyze` summary: a terminal table, and a self-contained HTML report with embedded PNG plots."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any

from skyrl_integrations.analysis.categories import CATEGORIES
from skyrl_integrations.analysis.dumps import step_title
from skyrl_integrations.analysis.metrics import OVERALL
from skyrl_integrations.extras import missing_extra

MISSING = "-"


# ---------------------------------------------------------------------------------------------- tables


def step_table(step: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows (one per environment, then overall) of one step's main numbers."""
    ks = sorted({int(k) for summary in step.values() for k in summary["pass_at_k"]})
    headers = ["env", "traj", "prompts", *(f"pass@{k}" for k in ks), *(f"pass^{k}" for k in ks)]
    headers += ["any", "mean score", "turns", "tool calls"]
    rows = []
    for name, s in step.items():
        rows.append(
            [
                name,
                str(s["trajectories"]),
                str(s["prompts"]),
                *(_number(s["pass_at_k"].get(str(k))) for k in ks),
                *(_number(s["pass_hat_k"].get(str(k))) for k in ks),
                _number(s["any_success"]),
                _number(s["mean_score"]),
                _number(s["avg_turns"], 2),
                _number(s["avg_tool_calls"], 2),
            ]
        )
    return headers, rows


def category_table(step: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows (one per category seen in the step) of trajectory counts per environment."""
    names = list(step)
    seen = [c for c in CATEGORIES if step[OVERALL]["failure_categories"][c]["count"]]
    rows = [[c, *(str(step[name]["failure_categories"][c]["count"]) for name in names)] for c in seen]
    return ["category", *names], rows


def comparison_table(comparison: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows (environment x compared number) of `from -> to (delta)`."""
    headers = ["env", "metric", comparison["from"], comparison["to"], "delta"]
    rows = []
    for name, values in comparison["groups"].items():
        for key, value in values.items():
            unknown = value["from"] is None and value["to"] is None
            if unknown or (key.endswith("_rate") and not value["delta"]):  # unchanged categories are left out
                continue
            delta = value["delta"]
            rows.append(
                [name, key, _number(value["from"]), _number(value["to"]), MISSING if delta is None else f"{delta:+.3f}"]
            )
    return headers, rows


def format_text(summary: dict[str, Any], examples_per_category: int = 1) -> str:
    """The terminal report: per step the main table, stop reasons, failure categories and examples; then the
    comparison of the first and last step."""
    out = []
    for label, step in summary["steps"].items():
        overall = step[OVERALL]
        out.append(f"== step {label}: {overall['trajectories']} trajectories ==")
        out.append(_text_table(*step_table(step)))
        reasons = ", ".join(f"{reason} {count}" for reason, count in overall["stop_reasons"].items())
        out.append(f"stop reasons: {reasons}")
        headers, rows = category_table(step)
        if rows:
            out.append("failure categories (trajectories):")
            out.append(_text_table(headers, rows))
            for category, entry in overall["failure_categories"].items():
                for example in entry["examples"][:examples_per_category]:
                    out.append(f"  {category}: {example['snippet']}  [{example['location']}]")
        else:
            out.append("failure categories: none")
        out.append("")
    if summary["comparison"] is not None:
        comparison = summary["comparison"]
        out.append(f"== step {comparison['from']} -> {comparison['to']} ==")
        out.append(_text_table(*comparison_table(comparison), left=2))
    return "\n".join(out).rstrip() + "\n"


def _number(value: float | None, digits: int = 3) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def _text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """Aligned columns: the first `left` (text) to the left, the others (numbers) to the right."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells):
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(headers), *(line(row) for row in rows)])


# ------------------------------------------------------------------------------------------------ HTML


def format_html(summary: dict[str, Any], title: str) -> str:
    """A single HTML page: plots (PNG, base64-embedded) then each step's tables and examples, then the
    comparison. Needs matplotlib."""
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Success: {_success_rule(summary['success_threshold'])}; environments by {summary['group_by']}.</p>",
    ]
    parts += [f"<h2>{html.escape(name)}</h2><img src='data:image/png;base64,{png}'>" for name, png in _plots(summary)]
    for label, step in summary["steps"].items():
        parts.append(f"<h2>Step {html.escape(label)}</h2>")
        parts.append(_html_table(*step_table(step)))
        reasons = step[OVERALL]["stop_reasons"]
        parts.append(_html_table(["stop reason", "trajectories"], [[r, str(c)] for r, c in reasons.items()]))
        headers, rows = category_table(step)
        if rows:
            parts.append("<h3>Failure categories (trajectories)</h3>")
            parts.append(_html_table(headers, rows))
            parts.append(_html_examples(step[OVERALL]["failure_categories"]))
    if summary["comparison"] is not None:
        comparison = summary["comparison"]
        parts.append(f"<h2>Step {html.escape(comparison['from'])} → {html.escape(comparison['to'])}</h2>")
        parts.append(_html_table(*comparison_table(comparison)))
    parts.append("</body></html>")
    return "\n".join(parts)


_CSS = (
    "body{font-family:sans-serif;margin:2em;max-width:70em} table{border-collapse:collapse;margin:1em 0}"
    " td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right} td:first-child,th:first-child{text-align:left}"
    " code{white-space:pre-wrap;background:#f4f4f4} img{max-width:100%}"
)


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _html_examples(categories: dict[str, dict[str, Any]]) -> str:
    items = []
    for category, entry in categories.items():
        for example in entry["examples"]:
            items.append(
                f"<li><b>{html.escape(category)}</b> <code>{html.escape(example['snippet'])}</code>"
                f" <small>{html.escape(example['location'])}</small></li>"
            )
    return f"<h3>Examples</h3><ul>{''.join(items)}</ul>" if items else ""


def _plots(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, base64 PNG): success per environment per step, turns histogram, stop reasons, failure categories."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, "analysis", "the HTML report's plots") from exc
    matplotlib.use("Agg")
    steps = summary["steps"]
    labels = list(steps)
    envs = list(next(iter(steps.values())))
    for step in steps.values():
        envs += [name for name in step if name not in envs]
    plots = [
        (
            "pass@1 per environment and step",
            _grouped_bars(envs, labels, lambda env, label: _get(steps[label].get(env), "pass_at_k", "1"), "pass@1"),
        )
    ]
    turn_counts = sorted({int(t) for step in steps.values() for t in step[OVERALL]["turns_histogram"]})
    if turn_counts:
        plots.append(
            (
                "Turns per trajectory (all environments)",
                _grouped_bars(
                    [str(t) for t in turn_counts],
                    labels,
                    lambda turns, label: steps[label][OVERALL]["turns_histogram"].get(turns, 0),
                    "trajectories",
                ),
            )
        )
    reasons = list(dict.fromkeys(r for step in steps.values() for r in step[OVERALL]["stop_reasons"]))
    plots.append(
        (
            "Stop reasons (all environments)",
            _grouped_bars(reasons, labels, lambda r, label: steps[label][OVERALL]["stop_reasons"].get(r, 0), "count"),
        )
    )
    seen = [c for c in CATEGORIES if any(step[OVERALL]["failure_categories"][c]["count"] for step in steps.values())]
    if seen:
        plots.append(
            (
                "Failure categories (share of trajectories, all environments)",
                _grouped_bars(
                    seen, labels, lambda c, label: steps[label][OVERALL]["failure_categories"][c]["rate"], "rate"
                ),
            )
        )
    return plots


def _get(summary: dict[str, Any] | None, *keys: str) -> float | None:
    value: Any = summary
    for key in keys:
        if value is None:
            return None
        value = value.get(key)
    return value


def _grouped_bars(groups: list[str], series: list[str], value, ylabel: str) -> str:
    """Bars of `value(group, series)` (None -> no bar), one colour per series (step); a base64 PNG."""
    import matplotlib.pyplot as plt

    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(groups) * max(len(series), 2) / 2 + 2), 3.6))
    for i, name in enumerate(series):
        heights = [value(group, name) for group in groups]
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [0.0 if h is None else h for h in heights], width, label=step_title(name))
    rotate = len(groups) > 4
    ax.set_xticks(range(len(groups)), groups, rotation=30 if rotate else 0, ha="right" if rotate else "center")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def _success_rule(threshold: float | None) -> str:
    if threshold is None:
        return "the env's success metric, else final reward &gt; 0"
    return f"return &gt; {threshold}"
