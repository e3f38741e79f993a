"""Where the policy, ref and critic workers run: placement groups with upstream SkyRL's semantics.

``plan_placement`` turns ``trainer.placement`` into a ``PlacementPlan`` (pure, no Ray); ``create_placement_groups``
reserves it on the cluster, or fails after a timeout naming what was asked and what the cluster has
(``skyrl_train.utils.ray_placement``). The rules (also in ``docs/distributed.md``):

- a role with ``{role}_num_nodes`` x ``{role}_num_gpus_per_node`` = W workers gets W bundles, one per worker;
  a bundle is ``{"GPU": 1, "CPU": 1}`` on GPUs and ``{"CPU": 1}`` on a CPU run;
- ``colocate_all``: policy, ref and critic share ONE placement group; worker rank r of every role sits in bundle
  r and asks for 0.2 of it (so the three, plus a colocated engine, fit in one device). Every role must then have
  the policy's world size;
- else ``colocate_policy_ref`` (when a ref group exists): policy and ref share one group, the policy asks for 0.75
  of each bundle and the ref for 0.25; the critic gets a group of its own;
- otherwise each role has its own group and each worker asks for a whole bundle;
- every group uses the PACK strategy (as few nodes as possible). Ranks are ordered by node: the node holding
  bundle 0 gets the first ranks, in bundle order, then the next node, so consecutive ranks share a node and rank
  0 (the process-group master) is on the first node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_train.utils.ray_placement import COLOCATED_SHARE, reserve_placement_group

__all__ = [
    "COLOCATED_SHARE",
    "POLICY_REF_SHARES",
    "PlacementPlan",
    "RolePlacement",
    "ReservedPlacement",
    "plan_placement",
    "create_placement_groups",
    "ranked_bundles",
    "remove_placement_groups",
]

POLICY_REF_SHARES = {"policy": 0.75, "ref": 0.25}
"""Shares of a bundle under ``colocate_policy_ref`` alone (upstream's values)."""


@dataclass(frozen=True)
class RolePlacement:
    """How one role's workers are placed: ``num_workers`` actors in ``group``, each asking ``share`` of a bundle."""

    role: str
    group: int
    """Index into ``PlacementPlan.groups``."""
    num_workers: int
    share: float
    """Fraction of its bundle's resources each worker requests (GPU and CPU alike)."""


@dataclass(frozen=True)
class PlacementPlan:
    groups: tuple[tuple[dict[str, float], ...], ...]
    """The bundles of each placement group."""
    roles: dict[str, RolePlacement]
    use_gpu: bool


def _world(placement: Any, role: str) -> int:
    return int(getattr(placement, f"{role}_num_nodes")) * int(getattr(placement, f"{role}_num_gpus_per_node"))


def plan_placement(placement: Any, roles: Sequence[str], use_gpu: bool) -> PlacementPlan:
    """The plan for ``roles`` (a subset of policy, ref, critic; policy first) under ``trainer.placement``.

    Raises:
        ValueError: ``colocate_all`` with a role whose world size differs from the policy's (names the keys).
    """
    if not roles or roles[0] != "policy":
        raise ValueError(f"roles must start with 'policy', got {list(roles)}")
    bundle = {"GPU": 1.0, "CPU": 1.0} if use_gpu else {"CPU": 1.0}
    groups: list[tuple[dict[str, float], ...]] = []
    placed: dict[str, RolePlacement] = {}

    def new_group(size: int) -> int:
        groups.append(tuple(dict(bundle) for _ in range(size)))
        return len(groups) - 1

    policy_world = _world(placement, "policy")
    if placement.colocate_all:
        for role in roles:
            if _world(placement, role) != policy_world:
                raise ValueError(
                    f"trainer.placement.colocate_all=true puts every role on the policy's {policy_world} bundles, "
                    f"but trainer.placement.{role}_num_nodes x {role}_num_gpus_per_node = {_world(placement, role)}"
                )
        shared = new_group(policy_world)
        return PlacementPlan(
            tuple(groups), {r: RolePlacement(r, shared, policy_world, COLOCATED_SHARE) for r in roles}, use_gpu
        )
    if placement.colocate_policy_ref and "ref" in roles:
        if _world(placement, "ref") != policy_world:
            raise ValueError(
                "trainer.placement.colocate_policy_ref=true needs ref_num_nodes x ref_num_gpus_per_node equal to the "
                f"policy's ({_world(placement, 'ref')} vs {policy_world})"
            )
        shared = new_group(policy_world)
        for role in ("policy", "ref"):
            placed[role] = RolePlacement(role, shared, policy_world, POLICY_REF_SHARES[role])
    for role in roles:
        if role not in placed:
            world = _world(placement, role)
            placed[role] = RolePlacement(role, new_group(world), world, 1.0)
    return PlacementPlan(tuple(groups), {role: placed[role] for role in roles}, use_gpu)


def ranked_bundles(bundle_nodes: dict[int, str]) -> list[int]:
    """Bundle indices in rank order: grouped by node, nodes in order of their lowest bundle, bundles ascending."""
    first_bundle: dict[str, int] = {}
    for index in sorted(bundle_nodes):
        first_bundle.setdefault(bundle_nodes[index], index)
    return sorted(bundle_nodes, key=lambda index: (first_bundle[bundle_nodes[index]], index))


@dataclass(frozen=True)
class ReservedPlacement:
    """A role's reserved placement: its placement group, the bundle of each rank, and its share of each bundle."""

    placement_group: Any
    bundle_of_rank: tuple[int, ...]
    share: float
    use_gpu: bool

    @property
    def world_size(self) -> int:
        return len(self.bundle_of_rank)


def create_placement_groups(plan: PlacementPlan, timeout_s: float | None = None) -> dict[str, ReservedPlacement]:
    """Reserve the plan's placement groups (PACK) and return each role's ``ReservedPlacement``.

    Raises:
        TimeoutError: the cluster cannot provide a group's bundles within ``timeout_s`` (None: the default of
            ``reserve_placement_group``); the message names the bundles asked for and the cluster's resources.
            The groups already reserved are removed.
    """
    from ray.util.placement_group import placement_group_table

    groups = []
    try:
        for index, bundles in enumerate(plan.groups):
            roles = [role for role, placed in plan.roles.items() if placed.group == index]
            groups.append(
                reserve_placement_group(
                    bundles,
                    purpose=f"the fsdp2 {' / '.join(roles)} workers",
                    remedy="Lower trainer.placement.* or add nodes.",
                    timeout_s=timeout_s,
                )
            )
        orders = [ranked_bundles(placement_group_table(group)["bundles_to_node_id"]) for group in groups]
    except BaseException:  # release the groups already reserved
        remove_placement_groups(groups)
        raise
    out = {}
    for role, role_placement in plan.roles.items():
        group, order = groups[role_placement.group], orders[role_placement.group]
        out[role] = ReservedPlacement(
            group, tuple(order[: role_placement.num_workers]), role_placement.share, plan.use_gpu
        )
    return out


def remove_placement_groups(groups: Iterable[Any]) -> None:
    """Remove each placement group that is not removed yet (several roles may share one)."""
    from ray.util.placement_group import placement_group_table, remove_placement_group

    for group in groups:
        if placement_group_table(group).get("state") != "REMOVED":
            remove_placement_group(group)
