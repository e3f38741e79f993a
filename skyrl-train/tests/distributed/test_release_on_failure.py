"""An fsdp2 run that fails inside a process that keeps running releases its Ray actors and placement groups.

Slow (~1 min on 2 cores: each case starts the machine's policy ranks, 2 on CPU, on a local Ray cluster):
`pytest -m slow skyrl-train/tests/distributed/test_release_on_failure.py`.

The run is `BasePPOExp.run` in this process (the driver stays alive, as in a notebook or a sweep); it fails once
while the workers are built (a critic whose model does not exist, after the policy actors started) and once after
they are built (the generator hook raises). Afterwards the cluster holds no alive actor and no placement group that
is not removed. A plan that cannot be reserved releases the groups it had already reserved.
"""

from __future__ import annotations

import pytest
import ray
from ray.util.placement_group import placement_group_table

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import load_config
from skyrl_train.config.schema import PlacementConfig
from skyrl_train.distributed.placement import create_placement_groups, plan_placement
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.testing import tiny_model_path
from skyrl_train.testing.ray import fsdp2_overrides, local_ray, machine_ranks  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.gpu, pytest.mark.usefixtures("local_ray")]

RANKS = machine_ranks()
WITH_CRITIC_RANKS = machine_ranks(groups=2)
"""Ranks of the policy and of the critic, whose groups take GPUs of their own."""


class GeneratorFails(BasePPOExp):
    def get_generator(self, cfg, tokenizer, engine):
        raise RuntimeError("generator hook failed")


def config(tmp_path, *extra: str):
    write_dataset(generate_dataset(train_size=4, val_size=0, seed=1, few_shot=0), tmp_path / "data")
    return load_config(
        [
            *fsdp2_overrides(),
            f"trainer.placement.policy_num_gpus_per_node={RANKS}",
            f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
            "data.val_data=[]",
            f"trainer.policy.model.path={tiny_model_path()}",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "generator.n_samples_per_prompt=2",
            "trainer.bf16=false",
            "trainer.gradient_checkpointing=false",
            "trainer.policy.model.lora.rank=4",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.logger=jsonl",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}",
            f"trainer.export_path={tmp_path / 'exports'}",
            *extra,
        ]
    )


def held_by_the_cluster() -> tuple[list[str], list[str]]:
    """(states of the placement groups not removed, class names of the alive actors)."""
    groups = [pg["state"] for pg in placement_group_table().values() if pg["state"] != "REMOVED"]
    actors = [a["ActorClassName"] for a in ray._private.state.actors().values() if a["State"] == "ALIVE"]
    return groups, actors


def test_a_failure_after_the_workers_are_built_releases_them(tmp_path):
    with pytest.raises(RuntimeError, match="generator hook failed"):
        GeneratorFails(config(tmp_path)).run()
    assert held_by_the_cluster() == ([], [])


@pytest.mark.skipif(WITH_CRITIC_RANKS == 0, reason="the critic's group needs GPUs of its own: 2 GPUs at least")
def test_a_failure_while_the_workers_are_built_releases_the_ones_already_started(tmp_path):
    cfg = config(
        tmp_path,
        f"trainer.critic.model.path={tmp_path / 'no_such_model'}",
        f"trainer.placement.policy_num_gpus_per_node={WITH_CRITIC_RANKS}",
        f"trainer.placement.critic_num_gpus_per_node={WITH_CRITIC_RANKS}",
        "trainer.critic_mini_batch_size=2",
        "trainer.algorithm.advantage_estimator=gae",
    )
    with pytest.raises(ray.exceptions.RayTaskError, match="no_such_model"):
        BasePPOExp(cfg).run()
    assert held_by_the_cluster() == ([], [])


def test_a_plan_the_cluster_cannot_hold_releases_the_groups_already_reserved():
    cfg = PlacementConfig(colocate_all=False, colocate_policy_ref=False, policy_num_gpus_per_node=2)
    cfg.critic_num_gpus_per_node = 64  # more CPUs than the local cluster has
    with pytest.raises(TimeoutError, match="could not reserve 64 bundles .* for the fsdp2 critic workers"):
        create_placement_groups(plan_placement(cfg, ["policy", "critic"], use_gpu=False), timeout_s=3)
    assert held_by_the_cluster() == ([], [])
