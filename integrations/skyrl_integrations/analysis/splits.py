"""Held-out success per template and entity split at every eval step, beside the best question-agnostic rule.

A trajectory's template is its row's ``extra_info.template`` (else its data source) and its split the row's
``extra_info.entity_split`` ("unseen": entities no training question names, "seen": training entities; else
`ALL_SPLIT`), both as the rule-based generator writes them. Success is pass@1 as `metrics.summarize` computes it
(greedy evals: the share of questions answered right). The rule baseline is the JSON that
``python -m skyrl_integrations.analysis.rule_baseline --json`` writes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_integrations.analysis.dumps import BASE_LABEL, DumpedTrajectory, step_title
from skyrl_integrations.analysis.metrics import OVERALL, summarize

ALL_SPLIT = "all"
"""The split of trajectories whose row has no ``extra_info.entity_split``."""


def template_of(trajectory: DumpedTrajectory) -> str:
    return str(trajectory.extra_info.get("template") or trajectory.group("data_source"))


def split_of(trajectory: DumpedTrajectory) -> str:
    return str(trajectory.extra_info.get("entity_split") or ALL_SPLIT)


def success_by_split(
    steps: Mapping[str, Sequence[DumpedTrajectory]], success_threshold: float | None = None
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{template: {split: {"questions": n, "steps": {step: pass@1}}}}``, templates sorted, then `OVERALL` per
    split; a step without trajectories of a group has None."""
    groups: dict[tuple[str, str], dict[str, list[DumpedTrajectory]]] = defaultdict(lambda: defaultdict(list))
    for label, trajectories in steps.items():
        for trajectory in trajectories:
            split = split_of(trajectory)
            groups[(template_of(trajectory), split)][label].append(trajectory)
            groups[(OVERALL, split)][label].append(trajectory)
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for template, split in sorted(groups, key=lambda key: (key[0] == OVERALL, key)):
        by_step = groups[(template, split)]
        table.setdefault(template, {})[split] = {
            "questions": max(summarize(t)["prompts"] for t in by_step.values()),
            "steps": {label: _pass_at_1(by_step.get(label, []), success_threshold) for label in steps},
        }
    return table


def _pass_at_1(trajectories: Sequence[DumpedTrajectory], success_threshold: float | None) -> float | None:
    return summarize(trajectories, success_threshold, max_examples=0)["pass_at_k"].get("1") if trajectories else None


def format_markdown(
    table: Mapping[str, Mapping[str, Mapping[str, Any]]], baseline: Mapping[str, Any] | None = None
) -> str:
    """The markdown report: one row per template and split, a column per eval step, the change from the first step
    after `base` to the last (with a warm start: what RL itself changed, as the run report's `change`), and (with
    ``baseline``) the best rule for that template and split and the best single rule's score."""
    labels = list(next(iter(next(iter(table.values())).values()))["steps"]) if table else []
    headers = ["template", "split", "questions", *(step_title(label) for label in labels), "change"]
    if baseline is not None:
        headers += ["best rule for it", "best single rule"]
    lines = [
        "# Held-out success per template and entity split",
        "",
        "Greedy pass@1 at each eval step. Split `unseen`: questions about companies and months no training question "
        "names; `seen`: training entities in questions training does not ask. `change`: the last eval minus the "
        "first after `base` (the model before the warm start), so with a warm start it is what RL itself changed.",
    ]
    if baseline is not None:
        lines.append(
            "Rules (`python -m skyrl_integrations.analysis.rule_baseline`): question-agnostic tool sequences that "
            "follow any error and answer a fixed field or number; `best rule for it` is the best of them on that "
            "row's questions, `best single rule` the one rule best on all templates of the split, scored on that row."
        )
    lines += ["", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for template, splits in table.items():
        for split, entry in splits.items():
            values = list(entry["steps"].values())
            after_base = [value for label, value in entry["steps"].items() if label != BASE_LABEL]
            cells = [template, split, str(entry["questions"]), *(_cell(v) for v in values), _change(after_base)]
            if baseline is not None:
                cells += _baseline_cells(baseline, template, split)
            lines.append("| " + " | ".join(cells) + " |")
    if baseline is not None:
        lines.append("")
        for split, best in baseline["overall"].items():
            lines.append(f"Best single rule [{split}]: {best['rule']} ({_cell(best['success'])}).")
    return "\n".join(lines) + "\n"


def _baseline_cells(baseline: Mapping[str, Any], template: str, split: str) -> list[str]:
    single = baseline["overall"].get(split)
    if template == OVERALL:  # over all templates the best rule is the best single rule
        return [_cell(None if single is None else single["success"])] * 2
    best = baseline["templates"].get(template, {}).get(split)
    per_template = None if single is None else single["per_template"].get(template)
    return [_cell(None if best is None else best["success"]), _cell(per_template)]


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _change(values: Sequence[float | None]) -> str:
    if len(values) < 2 or values[0] is None or values[-1] is None:
        return "-"
    return f"{values[-1] - values[0]:+.3f}"
