"""Aggregation of per-episode env metrics into per-environment batch metrics."""

from __future__ import annotations

from numbers import Number
from typing import Any


def default_aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """Average each numeric key over the episodes that report it (bools count as 0/1; other values are dropped)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for episode in metrics:
        for key, value in episode.items():
            if isinstance(value, Number) and not isinstance(value, complex):
                sums[key] = sums.get(key, 0.0) + float(value)
                counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}


def aggregate_for_environment(env_name: str, metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate with the registered class of `env_name` (its static `aggregate_metrics`)."""
    from skyrl_gym.envs.registration import load_env_creator, spec

    creator = load_env_creator(spec(env_name).entry_point)
    aggregate = getattr(creator, "aggregate_metrics", None)
    return aggregate(metrics) if aggregate is not None else default_aggregate_metrics(metrics)
