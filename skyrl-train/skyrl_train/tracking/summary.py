"""The run summary: steps run, total time, first/last/best of the main metrics, eval before vs after, and each
eval metric per data source at every eval step (a curve, shown as a table when there are more than two evals).

`summarize` returns plain JSON-ready data (NaN becomes None); `render_markdown` turns it into ``summary.md``.
"""

from __future__ import annotations

import math
from typing import Any

from skyrl_train.tracking.metric_keys import BASE_EVAL_PREFIX, EVAL_SPEC_NAMES, PLOT_SPECS
from skyrl_train.tracking.metrics_file import MetricsHistory


def _num(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _point(history: MetricsHistory, key: str, index: int) -> dict[str, Any]:
    steps, values = history.series(key)
    return {"step": steps[index], "value": _num(values[index])}


def _best(history: MetricsHistory, key: str, direction: str | None) -> dict[str, Any] | None:
    finite = [(v, s) for s, v in zip(*history.series(key), strict=True) if math.isfinite(v)]
    if direction is None or not finite:
        return None
    # Earliest step wins ties: max over (value, -step) / min over (value, step).
    value, step = max(finite, key=lambda p: (p[0], -p[1])) if direction == "max" else min(finite)
    return {"step": step, "value": value, "direction": direction}


def summarize(history: MetricsHistory) -> dict[str, Any]:
    keys = history.keys()
    train_steps = [s for s, values in history.steps.items() if any(not k.startswith("eval/") for k in values)]
    step_times = [v for v in history.series("timing/step")[1] if math.isfinite(v)]
    main: dict[str, Any] = {}
    for spec in PLOT_SPECS:
        if not spec.summarize or spec.name in EVAL_SPEC_NAMES:
            continue
        for key in spec.select(keys):
            main[key] = {
                "first": _point(history, key, 0),
                "last": _point(history, key, -1),
                "best": _best(history, key, spec.best),
            }
    eval_keys = sorted({k for spec in PLOT_SPECS if spec.name in EVAL_SPEC_NAMES for k in spec.select(keys)})
    evals = []
    for key in eval_keys:
        _, data_source, metric = key.split("/")
        before, after = _point(history, key, 0), _point(history, key, -1)
        change = None if None in (before["value"], after["value"]) else after["value"] - before["value"]
        entry = {"data_source": data_source, "metric": metric, "before": before, "after": after, "change": change}
        base_key = BASE_EVAL_PREFIX + key.removeprefix("eval/")
        if base_key in keys:  # a warm start ran: the model before it, then `before` is the warm-started policy
            entry["base"] = _point(history, base_key, 0)
        evals.append(entry)
    times = history.timestamps
    return {
        "memory": _memory(history),
        "steps_run": len(train_steps),
        "first_step": train_steps[0] if train_steps else None,
        "last_step": train_steps[-1] if train_steps else None,
        "total_time_s": {
            "wall_clock": max(times) - min(times) if times else None,
            "sum_of_timing_step": sum(step_times) if step_times else None,
        },
        "main_metrics": main,
        "eval_before_after": evals,
        "eval_curves": _eval_curves(history, eval_keys),
    }


def _memory(history: MetricsHistory) -> dict[str, Any] | None:
    """The highest `memory/peak_rss_gb` and its step, and `memory/rss_gb` at the first and last logged steps."""
    peaks = [(v, s) for s, v in zip(*history.series("memory/peak_rss_gb"), strict=True) if math.isfinite(v)]
    if not peaks:
        return None
    value, step = max(peaks, key=lambda p: (p[0], -p[1]))
    rss = [(s, v) for s, v in zip(*history.series("memory/rss_gb"), strict=True) if math.isfinite(v)]
    return {
        "peak_rss_gb": {"step": step, "value": value},
        "rss_gb_first": None if not rss else {"step": rss[0][0], "value": rss[0][1]},
        "rss_gb_last": None if not rss else {"step": rss[-1][0], "value": rss[-1][1]},
    }


def _eval_curves(history: MetricsHistory, eval_keys: list[str]) -> dict[str, dict[str, Any]]:
    """Per eval metric (``avg_score``, ``pass_at_<n>``): the steps that have it and each data source's value there
    (None where that source has no value), so the report shows the metric over training, not only its ends."""
    curves: dict[str, dict[str, Any]] = {}
    for key in eval_keys:
        _, data_source, metric = key.split("/")
        steps, values = history.series(key)
        curve = curves.setdefault(metric, {"steps": [], "data_sources": {}})
        curve["data_sources"][data_source] = dict(zip(steps, map(_num, values), strict=True))
        curve["steps"] = sorted(set(curve["steps"]) | set(steps))
    for curve in curves.values():
        curve["data_sources"] = {
            source: [by_step.get(step) for step in curve["steps"]] for source, by_step in curve["data_sources"].items()
        }
    return curves


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _fmt_point(point: dict[str, Any] | None) -> str:
    return "n/a" if point is None else f"{_fmt(point['value'])} (step {point['step']})"


def render_markdown(summary: dict[str, Any], title: str) -> str:
    times = summary["total_time_s"]
    lines = [
        f"# Run report: {title}",
        "",
        f"- Steps run: {summary['steps_run']}"
        + (f" (steps {summary['first_step']} to {summary['last_step']})" if summary["steps_run"] else ""),
        f"- Total time: {_fmt(times['wall_clock'])} s wall clock (first to last log); "
        f"{_fmt(times['sum_of_timing_step'])} s summed over `timing/step`",
    ]
    memory = summary.get("memory")
    if memory is not None:
        lines.append(
            f"- Peak RSS: {_fmt(memory['peak_rss_gb']['value'])} GB (step {memory['peak_rss_gb']['step']}; "
            f"`memory/peak_rss_gb`); RSS after a step: {_fmt_point(memory['rss_gb_first'])} first, "
            f"{_fmt_point(memory['rss_gb_last'])} last (`memory/rss_gb`)"
        )
    lines += [
        "",
        "## Main metrics",
        "",
    ]
    if summary["main_metrics"]:
        lines += ["| metric | first | last | best |", "|---|---|---|---|"]
        for key, m in summary["main_metrics"].items():
            best = m["best"]
            best_text = "-" if best is None else f"{_fmt_point(best)}, {best['direction']}"
            lines.append(f"| `{key}` | {_fmt_point(m['first'])} | {_fmt_point(m['last'])} | {best_text} |")
    else:
        lines.append("No main metrics found.")
    lines += ["", "## Eval before vs after", ""]
    if summary["eval_before_after"]:
        with_base = any("base" in e for e in summary["eval_before_after"])
        if with_base:
            lines += ["`base`: the model before the warm start; `before`: the policy RL starts from.", ""]
        lines += [
            "| data source | metric |" + (" base |" if with_base else "") + " before | after | change |",
            "|---|---|---|---|---|" + ("---|" if with_base else ""),
        ]
        for e in summary["eval_before_after"]:
            change = "n/a" if e["change"] is None else f"{e['change']:+.4g}"
            base = f" {_fmt_point(e.get('base'))} |" if with_base else ""
            lines.append(
                f"| {e['data_source']} | {e['metric']} |{base} {_fmt_point(e['before'])} | {_fmt_point(e['after'])} "
                f"| {change} |"
            )
    else:
        lines.append("No eval metrics found.")
    for metric, curve in summary.get("eval_curves", {}).items():
        if len(curve["steps"]) < 3:
            continue  # before and after only: the table above says it all
        sources = list(curve["data_sources"])
        lines += ["", f"## Eval `{metric}` over training", ""]
        lines += ["| step | " + " | ".join(sources) + " |", "|---" * (len(sources) + 1) + "|"]
        for i, step in enumerate(curve["steps"]):
            lines.append(f"| {step} | " + " | ".join(_fmt(curve["data_sources"][s][i]) for s in sources) + " |")
    lines += ["", "## Plots", ""]
    lines += [f"![{name}]({name}.png)" for name in summary.get("plots", [])] or ["No plots."]
    if summary.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {note}" for note in summary["notes"]]
    return "\n".join(lines) + "\n"
