"""Reward metrics of a batch of trajectories, overall and per data source.

Definitions (one each; training logs them under `reward/`, evaluation under `eval/`). A trajectory's return,
outcome and whether it is solved are defined in `skyrl_gym.common.outcomes`, shared with offline eval analysis.

- `avg_raw_reward`: mean return over trajectories;
- `pass_at_{n}`: fraction of prompts (uids) with at least one solved trajectory;
- `mean_positive_reward`: mean over trajectories of the sum of their positive rewards, Σ max(r, 0);
- `infra_failure_rate`: fraction of trajectories that ended in an infrastructure failure (env init/step failure,
  tool server failure, timeout);
- `variance_per_prompt`: mean, over prompts with >= 2 completed trajectories, of the population variance of their
  returns;
- `signal_ratio`: fraction of those prompts whose returns are not all equal (GRPO gets a gradient from them).
- `pass_hat_{k}` (tau-bench's pass^k): mean over prompts of `skyrl_gym.common.outcomes.pass_hat_k`, C(c, k) / C(n, k),
  the chance that k of a prompt's n trajectories (c solved), drawn without replacement, are all solved; for
  k = 1 .. the smallest n (`pass_hat_k_metrics`).

Infrastructure failures are in the denominator of every figure of what the policy achieved (`avg_raw_reward`,
`pass_at_{n}`, `mean_positive_reward`): such a trajectory is never solved and its return counts as 0, so crashes
and timeouts lower the reported success instead of raising it. Only the training-signal diagnostics
(`variance_per_prompt`, `signal_ratio`) are over completed trajectories, since failures are kept out of the
advantage baseline.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from statistics import fmean, pvariance
from typing import Any

from skyrl_gym.common.outcomes import Reward, pass_hat_k, trajectory_return, trajectory_solved


def sanitize_metric_key(name: str | None) -> str:
    """A data source as a metric-key segment: `None` -> "unknown", "/" -> "_"."""
    return "unknown" if name is None else str(name).replace("/", "_")


def _positive_part(reward: Reward) -> float:
    values = [reward] if isinstance(reward, int | float) else reward
    return float(sum(max(float(r), 0.0) for r in values))


def _group_metrics(
    rewards: list[Reward],
    uids: list[str],
    n: int,
    env_metrics: list[Mapping[str, Any] | None],
    infra_failed: list[bool],
) -> dict[str, float]:
    returns = [0.0 if failed else trajectory_return(r) for r, failed in zip(rewards, infra_failed, strict=True)]
    completed_returns_by_uid: dict[str, list[float]] = defaultdict(list)
    solved_by_uid: dict[str, bool] = defaultdict(bool)
    for reward, value, uid, env, failed in zip(rewards, returns, uids, env_metrics, infra_failed, strict=True):
        solved_by_uid[uid] |= not failed and trajectory_solved(reward, env)
        if not failed:
            completed_returns_by_uid[uid].append(value)
    multi = [values for values in completed_returns_by_uid.values() if len(values) >= 2]
    return {
        "avg_raw_reward": fmean(returns),
        f"pass_at_{n}": fmean(float(solved) for solved in solved_by_uid.values()),
        "mean_positive_reward": fmean(
            0.0 if failed else _positive_part(r) for r, failed in zip(rewards, infra_failed, strict=True)
        ),
        "infra_failure_rate": fmean(float(failed) for failed in infra_failed),
        "variance_per_prompt": fmean(pvariance(v) for v in multi) if multi else 0.0,
        "signal_ratio": fmean(float(len(set(v)) > 1) for v in multi) if multi else 0.0,
    }


def compute_reward_metrics(
    rewards: Sequence[Reward],
    uids: Sequence[str],
    n_samples_per_prompt: int,
    data_sources: Sequence[str | None] | None = None,
    infra_failed: Sequence[bool] | None = None,
    env_metrics: Sequence[Mapping[str, Any] | None] | None = None,
) -> dict[str, float]:
    """Metrics over all trajectories (one per row; keys as above) and per data source (`<data_source>/<key>`).

    `infra_failed[i]` marks a trajectory that ended in an infrastructure failure (default: none did).
    Returns an empty dict when there is no trajectory.
    """
    if not rewards:
        return {}
    failed = list(infra_failed) if infra_failed is not None else [False] * len(rewards)
    envs = list(env_metrics) if env_metrics is not None else [None] * len(rewards)

    def group(indices: list[int]) -> dict[str, float]:
        return _group_metrics(
            [rewards[i] for i in indices],
            [uids[i] for i in indices],
            n_samples_per_prompt,
            [envs[i] for i in indices],
            [failed[i] for i in indices],
        )

    return with_data_sources(group, len(rewards), data_sources)


def pass_hat_k_metrics(
    solved: Sequence[bool], uids: Sequence[str], data_sources: Sequence[str | None] | None = None
) -> dict[str, float]:
    """`pass_hat_{k}` for k = 1 .. the smallest number of trajectories of a prompt, over all trajectories and per data
    source (`<data_source>/pass_hat_{k}`). `solved[i]` is `trajectory_solved` of trajectory i (False for an
    infrastructure failure). Empty when there is no trajectory."""

    def group(indices: list[int]) -> dict[str, float]:
        by_uid: dict[str, list[bool]] = defaultdict(list)
        for i in indices:
            by_uid[uids[i]].append(bool(solved[i]))
        max_k = min(len(trials) for trials in by_uid.values())
        return {
            f"pass_hat_{k}": fmean(pass_hat_k(len(t), sum(t), k) for t in by_uid.values()) for k in range(1, max_k + 1)
        }

    return with_data_sources(group, len(solved), data_sources) if solved else {}


def with_data_sources(
    group: Callable[[list[int]], dict[str, float]], size: int, data_sources: Sequence[str | None] | None
) -> dict[str, float]:
    """`group` of all `size` trajectories, then `<data_source>/<key>` of each data source's trajectories."""
    metrics = group(list(range(size)))
    if data_sources is not None:
        by_source: dict[str, list[int]] = defaultdict(list)
        for i, source in enumerate(data_sources):
            by_source[sanitize_metric_key(source)].append(i)
        for source, indices in sorted(by_source.items()):
            metrics.update({f"{source}/{key}": value for key, value in group(indices).items()})
    return metrics
