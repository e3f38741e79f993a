"""Per-environment numbers of one eval step. Each has one definition, here:

- success of a trajectory: `skyrl_gym.common.outcomes.trajectory_solved` (the env's `success` metric when the dump has
  it, else final reward > 0: the trainer's `pass_at_n` definition); with `success_threshold` set, its return (the
  reward, or the sum of per-token rewards) is greater than the threshold instead;
- an infrastructure failure (`INFRA_STOP_REASONS`) is never a success and its return counts as 0, as in the
  trainer's eval metrics (`skyrl_train.metrics`): crashes and timeouts lower success, they never raise it;
  `infra_failure_rate` says how many there were. Scored trajectories are the others (`scored_trajectories`);
- `pass_at_k[k]`: the unbiased estimator 1 - C(n-c, k) / C(n, k) per prompt (n samples, c successes),
  averaged over prompts, for k = 1 .. the smallest n among the prompts;
- `pass_hat_k[k]`: tau-bench's pass^k, C(c, k) / C(n, k) per prompt (all of k samples succeed), averaged over
  prompts, for the same k (one definition: `skyrl_gym.common.outcomes.pass_hat_k`);
- `any_success`: fraction of prompts with at least one success (the fork's `pass_at_n`);
- `mean_score`: mean return over all trajectories; `avg_turns` / `avg_tool_calls`: means over the scored
  trajectories whose dump records them (`turns_known` / `tool_calls_known` say how many), None when none does;
  `turns_histogram`: turns -> trajectories;
- `stop_reasons`: trajectories per stop reason; `failure_categories`: see `skyrl_integrations.analysis.categories`.

`analyze` puts the steps together and compares the first step with the last (`to - from` deltas of the
`COMPARED` numbers, the pass@k both steps have, and the failure-category rates).

Samples of one prompt are grouped by their trajectory id's instance id, else by identical `input_prompt`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from math import comb
from statistics import fmean
from typing import Any

from skyrl_gym.common.outcomes import pass_hat_k
from skyrl_integrations.analysis.categories import CATEGORIES, INFRA_STOP_REASONS, Finding, classify
from skyrl_integrations.analysis.dumps import DumpedTrajectory

OVERALL = "overall"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c of them correct) is correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def summarize(
    trajectories: Sequence[DumpedTrajectory], success_threshold: float | None = None, max_examples: int = 3
) -> dict[str, Any]:
    """The numbers above for one set of trajectories (keys as in the module doc)."""
    scored = [t for t in trajectories if t.stop_reason not in INFRA_STOP_REASONS]
    by_prompt: dict[str, list[bool]] = defaultdict(list)
    for trajectory in trajectories:
        completed = trajectory.stop_reason not in INFRA_STOP_REASONS
        by_prompt[trajectory.prompt_key].append(completed and trajectory.succeeded(success_threshold))
    turns = [t.num_turns for t in scored if t.num_turns is not None]
    tool_calls = [t.tool_calls for t in scored if t.tool_calls is not None]
    max_k = min((len(samples) for samples in by_prompt.values()), default=0)
    return {
        "trajectories": len(trajectories),
        "scored_trajectories": len(scored),
        "prompts": len(by_prompt),
        "pass_at_k": {
            str(k): fmean(pass_at_k(len(s), sum(s), k) for s in by_prompt.values()) for k in range(1, max_k + 1)
        },
        "pass_hat_k": {
            str(k): fmean(pass_hat_k(len(s), sum(s), k) for s in by_prompt.values()) for k in range(1, max_k + 1)
        },
        "any_success": fmean(any(s) for s in by_prompt.values()) if by_prompt else None,
        "mean_score": (
            fmean(0.0 if t.stop_reason in INFRA_STOP_REASONS else t.score for t in trajectories)
            if trajectories
            else None
        ),
        "infra_failure_rate": 1 - len(scored) / len(trajectories) if trajectories else None,
        "avg_turns": fmean(turns) if turns else None,
        "turns_known": len(turns),
        "turns_histogram": {str(n): count for n, count in sorted(Counter(turns).items())},
        "avg_tool_calls": fmean(tool_calls) if tool_calls else None,
        "tool_calls_known": len(tool_calls),
        "stop_reasons": dict(Counter(str(t.stop_reason) for t in trajectories).most_common()),
        "failure_categories": _categories(trajectories, success_threshold, max_examples),
    }


def summarize_step(
    trajectories: Sequence[DumpedTrajectory],
    group_by: str,
    success_threshold: float | None = None,
    max_examples: int = 3,
) -> dict[str, dict[str, Any]]:
    """`summarize` per environment (sorted by name), then under `OVERALL` for all of them."""
    groups: dict[str, list[DumpedTrajectory]] = defaultdict(list)
    for trajectory in trajectories:
        groups[trajectory.group(group_by)].append(trajectory)
    summary = {name: summarize(groups[name], success_threshold, max_examples) for name in sorted(groups)}
    summary[OVERALL] = summarize(trajectories, success_threshold, max_examples)
    return summary


def _categories(
    trajectories: Sequence[DumpedTrajectory], success_threshold: float | None, max_examples: int
) -> dict[str, dict[str, Any]]:
    """Every category (in `CATEGORIES` order) -> the trajectories with at least one finding of it (`count`,
    `rate`) and up to `max_examples` examples (a trajectory's first finding of the category)."""
    found = {category: {"count": 0, "rate": 0.0, "examples": []} for category in CATEGORIES}
    for trajectory in trajectories:
        first: dict[str, Finding] = {}
        for finding in classify(trajectory, success_threshold):
            first.setdefault(finding.category, finding)
        for category, finding in first.items():
            entry = found[category]
            entry["count"] += 1
            if len(entry["examples"]) < max_examples:
                entry["examples"].append({"location": trajectory.location, "snippet": finding.snippet})
    for entry in found.values():
        entry["rate"] = entry["count"] / len(trajectories) if trajectories else 0.0
    return found


COMPARED = ("any_success", "mean_score", "avg_turns", "avg_tool_calls")


def analyze(
    steps: dict[str, Sequence[DumpedTrajectory]],
    group_by: str = "data_source",
    success_threshold: float | None = None,
    max_examples: int = 3,
) -> dict[str, Any]:
    """The whole summary: settings, `steps` (label -> `summarize_step`) and, for two or more steps, `comparison`."""
    summaries = {label: summarize_step(t, group_by, success_threshold, max_examples) for label, t in steps.items()}
    labels = list(summaries)
    comparison = None
    if len(labels) >= 2:
        comparison = {"from": labels[0], "to": labels[-1], **compare(summaries[labels[0]], summaries[labels[-1]])}
    return {
        "group_by": group_by,
        "success_threshold": success_threshold,
        "steps": summaries,
        "comparison": comparison,
    }


def compare(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per environment in both steps: metric -> {"from", "to", "delta"} (delta None when either is None)."""
    groups = {}
    for name in [name for name in after if name in before]:
        a, b = before[name], after[name]
        values = {key: (a[key], b[key]) for key in COMPARED}
        for metric in ("pass_at_k", "pass_hat_k"):
            for k in [k for k in b[metric] if k in a[metric]]:
                values[f"{metric[:-2]}_{k}"] = (a[metric][k], b[metric][k])
        for category in CATEGORIES:
            values[f"{category}_rate"] = (
                a["failure_categories"][category]["rate"],
                b["failure_categories"][category]["rate"],
            )
        groups[name] = {
            key: {"from": x, "to": y, "delta": None if x is None or y is None else y - x}
            for key, (x, y) in values.items()
        }
    return {"groups": groups}
