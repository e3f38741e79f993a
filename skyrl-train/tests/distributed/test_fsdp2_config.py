"""Which configs accept the fsdp2-only keys (placement, sharding), and the documented CPU overrides."""

from __future__ import annotations

import pytest

from skyrl_train.config import ConfigError, load_config


def test_placement_and_sharding_keys_are_refused_with_the_single_strategy():
    with pytest.raises(ConfigError) as error:
        load_config(["trainer.placement.colocate_all=false", "trainer.ref.fsdp_config.fsdp_size=2"])
    fsdp2_only = "has no effect in this config: it applies only with trainer.strategy=fsdp2"
    assert sorted(p.split("=")[0] for p in error.value.problems if fsdp2_only in p) == [
        "trainer.placement.colocate_all",
        "trainer.ref.fsdp_config.fsdp_size",
    ]


def test_the_documented_cpu_overrides_for_fsdp2_validate():
    cfg = load_config(
        [
            "trainer.strategy=fsdp2",
            "trainer.placement.colocate_all=false",
            "trainer.placement.policy_num_gpus_per_node=2",
            "trainer.placement.ref_num_gpus_per_node=2",
        ]
    )
    assert (cfg.trainer.strategy, cfg.trainer.placement.policy_num_gpus_per_node) == ("fsdp2", 2)


def test_reference_and_critic_keys_are_refused_where_nothing_reads_them():
    with pytest.raises(ConfigError) as error:
        load_config(
            [
                "trainer.strategy=fsdp2",
                "trainer.policy.model.lora.rank=8",  # the reference is the policy with its adapter off ...
                "trainer.placement.ref_num_gpus_per_node=2",  # ... so its own placement would be ignored
                "trainer.critic_mini_batch_size=64",  # no critic
                "trainer.algorithm.kl_ctrl.type=adaptive",  # the KL is in the loss, not in the reward
            ]
        )
    assert sorted(p.split(" has no effect")[0] for p in error.value.problems) == [
        "trainer.algorithm.kl_ctrl.type='adaptive'",
        "trainer.critic_mini_batch_size=64",
        "trainer.placement.ref_num_gpus_per_node=2",
    ]


def test_a_lora_policy_needs_no_reference_placement():
    cfg = load_config(
        [
            "trainer.strategy=fsdp2",
            "trainer.policy.model.lora.rank=8",
            "trainer.placement.colocate_all=false",
            "trainer.placement.policy_num_gpus_per_node=2",
        ]
    )
    assert cfg.trainer.placement.ref_num_gpus_per_node == 1  # colocate_policy_ref does not ask for a 2 here
