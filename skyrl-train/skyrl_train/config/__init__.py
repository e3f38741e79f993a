"""Typed config of skyrl_train: schema, loading with Hydra-style overrides, validation.

    from skyrl_train.config import load_config
    cfg = load_config(["trainer.epochs=2", "generator.max_turns=3"])   # typed, validated SkyRLConfig

The schema (`schema.py`) declares every key once; `ppo_base_config.yaml` and
`docs/config_reference.md` are rendered from it (`python -m skyrl_train.config.render_yaml`).
Keys declared for upstream compatibility but not implemented here are listed in `support.py` and refused
unless left at their default.
"""

from skyrl_train.config.errors import ConfigError
from skyrl_train.config.loader import BASE_CONFIG_PATH, CONFIG_DIR, CONFIG_NAME, build_config, load_config
from skyrl_train.config.schema import (
    AlgorithmConfig,
    DataConfig,
    EnvironmentConfig,
    GeneratorConfig,
    SamplingParams,
    SkyRLConfig,
    SkyRLGymConfig,
    TrainerConfig,
    to_dict,
)
from skyrl_train.config.validate import critic_dp_size, policy_dp_size, validate_cfg

__all__ = [
    "AlgorithmConfig",
    "BASE_CONFIG_PATH",
    "CONFIG_DIR",
    "CONFIG_NAME",
    "ConfigError",
    "DataConfig",
    "EnvironmentConfig",
    "GeneratorConfig",
    "SamplingParams",
    "SkyRLConfig",
    "SkyRLGymConfig",
    "TrainerConfig",
    "build_config",
    "critic_dp_size",
    "load_config",
    "policy_dp_size",
    "to_dict",
    "validate_cfg",
]
