"""Which configs accept the fsdp2-only keys (placement, sharding), and the documented CPU overrides."""

from __future__ import annotations

import pytest

from skyrl_train.config import ConfigError, load_config


def test_placement_and_sharding_keys_are_refused_with_the_single_strategy():
    with pytest.raises(ConfigError) as error:
        load_config(["trainer.placement.colocate_all=false", "trainer.ref.fsdp_config.fsdp_size=2"])
    assert sorted(p.split("=")[0] for p in error.value.problems if "only applies to trainer.strategy=fsdp2" in p) == [
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
