"""Reserving a Ray placement group with a deadline.

Ray keeps a placement group the cluster cannot hold pending forever, and whatever waits for it (``ray.get`` on an
actor placed in it) waits forever too. `reserve_placement_group` waits at most `PLACEMENT_TIMEOUT_S`, then removes the
group and raises a `TimeoutError` that names what was asked (bundles, GPUs, CPUs) and what the cluster has. The
fsdp2 workers' groups (`skyrl_train.distributed.placement`) and the vLLM engines' own groups
(`skyrl_train.inference_engines.vllm.ray_engine`) are reserved through it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["COLOCATED_SHARE", "PLACEMENT_TIMEOUT_S", "reserve_placement_group"]

COLOCATED_SHARE = 0.2
"""Share of a bundle each worker (and a colocated vLLM engine) asks for under ``colocate_all`` (upstream's value)."""

PLACEMENT_TIMEOUT_S = 180.0
"""How long a placement group may stay pending: long enough for resources a previous run still holds to be freed
(and for an autoscaler to add a node), short enough that a request no node can satisfy fails in minutes."""


def reserve_placement_group(
    bundles: Sequence[Mapping[str, float]],
    *,
    purpose: str,
    remedy: str,
    strategy: str = "PACK",
    timeout_s: float | None = None,
) -> Any:
    """Create a placement group of ``bundles`` and return it once the cluster holds it.

    Args:
        bundles: the resources of each bundle, e.g. ``{"GPU": 1.0, "CPU": 1.0}``.
        purpose: what the group is for, for the error (e.g. ``"the fsdp2 policy workers"``).
        remedy: what to change when the cluster cannot hold it, a sentence (e.g. ``"Lower trainer.placement.* or
            add nodes."``).
        strategy: Ray's placement strategy.
        timeout_s: how long to wait; None: `PLACEMENT_TIMEOUT_S`.

    Raises:
        TimeoutError: the group is still pending after ``timeout_s``; it is removed first.
    """
    from ray.util.placement_group import placement_group, remove_placement_group

    timeout_s = PLACEMENT_TIMEOUT_S if timeout_s is None else timeout_s
    group = placement_group([dict(bundle) for bundle in bundles], strategy=strategy)
    try:
        ready = group.wait(timeout_seconds=timeout_s)
    except BaseException:
        remove_placement_group(group)
        raise
    if not ready:
        remove_placement_group(group)
        raise TimeoutError(
            f"the Ray cluster could not reserve {_asked(bundles)} for {purpose} within {timeout_s:g} s; "
            f"{_cluster_has(bundles)}. {remedy}"
        )
    return group


def _asked(bundles: Sequence[Mapping[str, float]]) -> str:
    """E.g. ``2 bundles of {'GPU': 1.0, 'CPU': 1.0} (2 GPUs, 2 CPUs in all)``."""
    shapes = [dict(bundle) for bundle in bundles]
    described = f"of {shapes[0]}" if all(shape == shapes[0] for shape in shapes) else str(shapes)
    totals = ", ".join(_count(sum(shape.get(key, 0.0) for shape in shapes), key) for key in _keys(bundles))
    return f"{len(shapes)} bundle{'s' if len(shapes) != 1 else ''} {described} ({totals} in all)"


def _cluster_has(bundles: Sequence[Mapping[str, float]]) -> str:
    """What the cluster has of each resource the bundles ask for, in total and available now."""
    import ray

    total, available = ray.cluster_resources(), ray.available_resources()
    described = ", ".join(
        f"{_count(total.get(key, 0.0), key)} ({available.get(key, 0.0):g} available)" for key in _keys(bundles)
    )
    return f"the cluster has {described}"


def _keys(bundles: Sequence[Mapping[str, float]]) -> list[str]:
    """The resources the bundles ask for: GPU and CPU first, then any other in the order asked."""
    asked = list(dict.fromkeys(key for bundle in bundles for key in bundle))
    return [key for key in ("GPU", "CPU") if key in asked] + [key for key in asked if key not in ("GPU", "CPU")]


def _count(amount: float, resource: str) -> str:
    """E.g. ``1 GPU``, ``0 GPUs``, ``2.5 CPUs``."""
    return f"{amount:g} {resource}{'' if amount == 1 else 's'}"
