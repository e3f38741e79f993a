"""What `FSDP2` plans without starting Ray: the worker groups a config places, and what a local engine generates from
when it gets weight syncs. Building the groups on a real local Ray cluster is covered by the slow tests in
`tests/distributed` (`test_fsdp2_matches_single.py`, `test_release_on_failure.py`, `test_fsdp2_run.py`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from skyrl_train.config import load_config
from skyrl_train.distributed.worker_groups import fsdp2_roles
from skyrl_train.strategies import FSDP2, EnginePolicy


def config(*overrides: str):
    """Two policy ranks, not colocated with the engines (docs/distributed.md's CPU recipe)."""
    fsdp2 = ["trainer.strategy=fsdp2", "trainer.placement.colocate_all=false"]
    return load_config([*fsdp2, "trainer.placement.policy_num_gpus_per_node=2", *overrides])


@pytest.mark.parametrize(
    ("overrides", "roles"),
    [
        (["trainer.policy.model.lora.rank=4"], ["policy"]),  # the LoRA policy's actors serve the reference
        (["trainer.placement.ref_num_gpus_per_node=2"], ["policy", "ref"]),
        (["trainer.algorithm.use_kl_loss=false"], ["policy"]),
        (
            [
                "trainer.algorithm.use_kl_loss=false",
                "trainer.critic.model.path=smollm2-135m-instruct",
                "trainer.algorithm.advantage_estimator=gae",
            ],
            ["policy", "critic"],
        ),
    ],
    ids=["lora-kl", "full-kl", "no-kl", "critic"],
)
def test_the_groups_placed_follow_the_reference_and_critic_the_config_needs(overrides, roles):
    assert fsdp2_roles(config(*overrides).trainer) == roles


@pytest.mark.parametrize(
    "overrides",
    [
        ["generator.run_engines_locally=false", "generator.remote_inference_engine_urls=['127.0.0.1:8001']"],
        ["generator.backend=vllm"],
    ],
    ids=["remote", "vllm"],
)
def test_engines_that_receive_weight_syncs_get_the_policy_group_itself(overrides):
    cfg = config("trainer.policy.model.lora.rank=4", *overrides)
    group = object()  # passed through untouched: nothing is built or called
    assert FSDP2(cfg).engine_policy(group) == EnginePolicy(group, None)


def test_colocated_vllm_engines_take_the_policy_groups_placement_group_and_bundles():
    cfg = config("trainer.policy.model.lora.rank=4", "generator.backend=vllm")
    actors = SimpleNamespace(placement_group="policy-pg", bundle_of_rank=[0, 1])
    assert FSDP2(cfg).engine_placement(SimpleNamespace(actors=actors)) == ("policy-pg", [0, 1])
    assert FSDP2(cfg).engine_placement(None) is None  # an eval-only run builds no policy
