"""`strategy_for` is the one place that maps `trainer.strategy` to its class, and it knows exactly the names the
config layer accepts."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config import ConfigError, load_config
from skyrl_train.config.schema import DISTRIBUTED_STRATEGIES, STRATEGIES
from skyrl_train.strategies import FSDP2, STRATEGY_CLASSES, SingleProcess, strategy_for


def test_the_registry_implements_exactly_the_strategies_the_config_accepts():
    assert set(STRATEGY_CLASSES) == set(STRATEGIES) == {"single", "fsdp2"}
    assert all(cls.name == name for name, cls in STRATEGY_CLASSES.items())
    assert {name for name, cls in STRATEGY_CLASSES.items() if cls is FSDP2} == DISTRIBUTED_STRATEGIES


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [([], SingleProcess), (["trainer.strategy=fsdp2", "trainer.placement.colocate_all=false"], FSDP2)],
    ids=["single", "fsdp2"],
)
def test_the_strategy_is_the_class_its_name_maps_to(overrides, expected):
    strategy = strategy_for(load_config(["trainer.device=cpu", *overrides]))
    assert type(strategy) is expected
    assert (strategy.device, strategy.dtype) == (torch.device("cpu"), torch.float32)


def test_an_unknown_strategy_is_refused_naming_the_key():
    cfg = load_config(["trainer.strategy=megatron"], validate=False)
    with pytest.raises(ConfigError, match=r"^trainer.strategy must be one of 'single', 'fsdp2', got 'megatron'$"):
        strategy_for(cfg)
