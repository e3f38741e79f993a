"""`plan_placement` and `ranked_bundles`: the placement rules of docs/distributed.md, without Ray."""

from __future__ import annotations

import pytest

from skyrl_train.config.schema import PlacementConfig
from skyrl_train.distributed.placement import RolePlacement, plan_placement, ranked_bundles

GPU_BUNDLE = {"GPU": 1.0, "CPU": 1.0}


def placement(**overrides) -> PlacementConfig:
    return PlacementConfig(**overrides)


def test_colocate_all_puts_every_role_on_the_policy_bundles_with_a_fifth_each():
    cfg = placement(colocate_all=True, policy_num_nodes=2, policy_num_gpus_per_node=4)
    cfg.ref_num_nodes, cfg.ref_num_gpus_per_node = 2, 4
    cfg.critic_num_nodes, cfg.critic_num_gpus_per_node = 2, 4
    plan = plan_placement(cfg, ["policy", "ref", "critic"], use_gpu=True)
    assert plan.groups == ((GPU_BUNDLE,) * 8,)
    assert plan.roles == {
        "policy": RolePlacement("policy", 0, 8, 0.2),
        "ref": RolePlacement("ref", 0, 8, 0.2),
        "critic": RolePlacement("critic", 0, 8, 0.2),
    }


def test_colocate_policy_ref_shares_one_group_three_quarters_to_one_quarter_and_the_critic_gets_its_own():
    cfg = placement(colocate_all=False, colocate_policy_ref=True, policy_num_gpus_per_node=4, ref_num_gpus_per_node=4)
    cfg.critic_num_gpus_per_node = 2
    plan = plan_placement(cfg, ["policy", "ref", "critic"], use_gpu=True)
    assert plan.groups == ((GPU_BUNDLE,) * 4, (GPU_BUNDLE,) * 2)
    assert plan.roles == {
        "policy": RolePlacement("policy", 0, 4, 0.75),
        "ref": RolePlacement("ref", 0, 4, 0.25),
        "critic": RolePlacement("critic", 1, 2, 1.0),
    }


def test_split_layout_gives_each_role_a_group_of_whole_bundles():
    cfg = placement(colocate_all=False, colocate_policy_ref=False, policy_num_gpus_per_node=4)
    cfg.ref_num_gpus_per_node, cfg.critic_num_nodes, cfg.critic_num_gpus_per_node = 2, 2, 1
    plan = plan_placement(cfg, ["policy", "ref", "critic"], use_gpu=True)
    assert plan.groups == ((GPU_BUNDLE,) * 4, (GPU_BUNDLE,) * 2, (GPU_BUNDLE,) * 2)
    assert [(p.group, p.num_workers, p.share) for p in plan.roles.values()] == [(0, 4, 1.0), (1, 2, 1.0), (2, 2, 1.0)]


def test_colocate_policy_ref_without_a_ref_group_places_the_policy_alone():
    cfg = placement(colocate_all=False, colocate_policy_ref=True, policy_num_gpus_per_node=2)
    plan = plan_placement(cfg, ["policy"], use_gpu=False)
    assert plan.groups == (({"CPU": 1.0},) * 2,)
    assert plan.roles == {"policy": RolePlacement("policy", 0, 2, 1.0)}


def test_cpu_runs_get_cpu_bundles():
    cfg = placement(colocate_all=True, policy_num_gpus_per_node=2)
    cfg.ref_num_gpus_per_node = 2
    plan = plan_placement(cfg, ["policy", "ref"], use_gpu=False)
    assert plan.groups == (({"CPU": 1.0},) * 2,)


def test_colocate_all_with_a_smaller_critic_names_the_keys():
    cfg = placement(colocate_all=True, policy_num_gpus_per_node=4)
    with pytest.raises(ValueError, match="critic_num_nodes x critic_num_gpus_per_node = 1"):
        plan_placement(cfg, ["policy", "critic"], use_gpu=True)


def test_ranks_follow_nodes_in_order_of_their_lowest_bundle():
    # Bundles 0 and 2 landed on node "b", 1 and 3 on node "a": node "b" holds bundle 0, so it gets ranks 0 and 1.
    assert ranked_bundles({0: "b", 1: "a", 2: "b", 3: "a"}) == [0, 2, 1, 3]
    assert ranked_bundles({0: "x", 1: "x", 2: "y"}) == [0, 1, 2]
