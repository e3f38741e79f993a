"""Placement on a real two-node Ray cluster (2 x `ray start` on this machine, 4 fake GPUs each).

Slow (~90 s on 2 cores: two nodes start and up to 24 worker processes spawn):
`pytest -m slow skyrl-train/tests/distributed/test_placement_cluster.py`.

Each layout of docs/distributed.md is reserved with `create_placement_groups` and filled with `ActorGroup`s of
`DistributedActor`, which report the node, the GPU ids and the resources Ray gave them.
"""

from __future__ import annotations

import pytest

from skyrl_train.config.schema import PlacementConfig
from skyrl_train.distributed.actor_group import ActorGroup, DistributedActor
from skyrl_train.distributed.placement import create_placement_groups, plan_placement
from skyrl_train.testing.ray import two_node_ray  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("two_node_ray")]


@pytest.fixture
def place():
    """``place(placement_config, roles) -> {role: [placement_info of rank 0, 1, ...]}``; removes what it made."""
    made = []

    def run(cfg: PlacementConfig, roles: list[str]) -> dict[str, list[dict]]:
        reserved = create_placement_groups(plan_placement(cfg, roles, use_gpu=True))
        groups = {role: ActorGroup(DistributedActor, placement) for role, placement in reserved.items()}
        made.extend(groups.values())
        return {role: group.run("placement_info") for role, group in groups.items()}

    yield run
    for group in made:
        group.kill()


def node_and_gpu(info: dict) -> tuple[str, tuple[str, ...]]:
    return info["node_id"], tuple(info["gpu_ids"])


def test_colocate_all_over_two_nodes_shares_each_gpu_between_the_ranks_of_every_role(place):
    cfg = PlacementConfig(colocate_all=True, policy_num_nodes=2, policy_num_gpus_per_node=4)
    cfg.ref_num_nodes = cfg.critic_num_nodes = 2
    cfg.ref_num_gpus_per_node = cfg.critic_num_gpus_per_node = 4
    placed = place(cfg, ["policy", "ref", "critic"])
    policy = placed["policy"]
    nodes = [info["node_id"] for info in policy]
    # ranks 0-3 on the node of bundle 0, ranks 4-7 on the other node, one GPU each, all distinct per node
    assert len(set(nodes[:4])) == 1 and len(set(nodes[4:])) == 1 and nodes[0] != nodes[4]
    assert sorted(info["gpu_ids"][0] for info in policy[:4]) == ["0", "1", "2", "3"]
    assert sorted(info["gpu_ids"][0] for info in policy[4:]) == ["0", "1", "2", "3"]
    for role in ("ref", "critic"):
        assert [node_and_gpu(info) for info in placed[role]] == [node_and_gpu(info) for info in policy]
    for role in ("policy", "ref", "critic"):
        assert {info["resources"]["GPU"] for info in placed[role]} == {0.2}
        assert [info["cuda_visible_devices"] for info in placed[role]] == [info["gpu_ids"][0] for info in policy]


def test_colocate_policy_ref_shares_gpus_three_to_one_and_the_critic_takes_the_other_node(place):
    cfg = PlacementConfig(colocate_all=False, colocate_policy_ref=True, policy_num_gpus_per_node=4)
    cfg.ref_num_gpus_per_node = cfg.critic_num_gpus_per_node = 4
    placed = place(cfg, ["policy", "ref", "critic"])
    policy, ref, critic = placed["policy"], placed["ref"], placed["critic"]
    assert [node_and_gpu(info) for info in ref] == [node_and_gpu(info) for info in policy]
    assert len({info["node_id"] for info in policy}) == 1  # PACK: one node holds the 4 policy/ref bundles
    critic_nodes = {info["node_id"] for info in critic}
    assert len(critic_nodes) == 1 and critic_nodes != {policy[0]["node_id"]}
    assert {info["resources"]["GPU"] for info in policy} == {0.75}
    assert {info["resources"]["GPU"] for info in ref} == {0.25}
    assert {info["resources"]["GPU"] for info in critic} == {1.0}
    assert sorted(info["gpu_ids"][0] for info in critic) == ["0", "1", "2", "3"]


def test_split_layout_packs_each_role_onto_whole_gpus(place):
    cfg = PlacementConfig(colocate_all=False, colocate_policy_ref=False, policy_num_gpus_per_node=4)
    cfg.ref_num_gpus_per_node = cfg.critic_num_gpus_per_node = 2
    placed = place(cfg, ["policy", "ref", "critic"])
    policy_node = {info["node_id"] for info in placed["policy"]}
    other = {info["node_id"] for info in placed["ref"] + placed["critic"]}
    assert len(policy_node) == 1 and len(other) == 1 and policy_node != other
    gpus_on_other = [info["gpu_ids"][0] for info in placed["ref"] + placed["critic"]]
    assert sorted(gpus_on_other) == ["0", "1", "2", "3"]  # ref and critic split the second node's GPUs
    for role in ("policy", "ref", "critic"):
        assert {info["resources"]["GPU"] for info in placed[role]} == {1.0}
        assert [info["rank"] for info in placed[role]] == list(range(len(placed[role])))
