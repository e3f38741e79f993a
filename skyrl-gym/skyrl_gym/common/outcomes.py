"""What a trajectory achieved, defined once for training metrics, evaluation and offline analysis of eval dumps:

- return: the sum of its rewards (a scalar reward is its own sum);
- outcome: its final reward, the scalar or the LAST token's reward of a per-token list;
- solved: the env's own `success` metric when it reports one (e.g. the MCP env, whose graded reward is also
  positive for a well-formed call with a wrong answer), else outcome > 0;
- `pass_hat_k` (tau-bench's pass^k) of one prompt from its trial counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import comb
from typing import Any

Reward = float | Sequence[float]


def trajectory_return(reward: Reward) -> float:
    return float(reward) if isinstance(reward, int | float) else float(sum(reward))


def trajectory_outcome(reward: Reward) -> float:
    if isinstance(reward, int | float):
        return float(reward)
    return float(reward[-1]) if len(reward) else 0.0


def trajectory_solved(reward: Reward, env_metrics: Mapping[str, Any] | None = None) -> bool:
    if env_metrics and env_metrics.get("success") is not None:
        return bool(env_metrics["success"])
    return trajectory_outcome(reward) > 0


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k of one prompt: the probability that k of its n trials (c of them solved), drawn without replacement,
    are all solved, C(c, k) / C(n, k). Unlike pass@k it falls as k grows: it measures consistency."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_hat_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return comb(c, k) / comb(n, k)
