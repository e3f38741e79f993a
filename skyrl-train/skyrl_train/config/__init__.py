"""Typed config of skyrl_train: schema, loading with Hydra-style overrides, validation.

    from skyrl_train.config import load_config
    cfg = load_config(["trainer.epochs=2", "generator.max_turns=3"])   # typed, validated SkyRLConfig
    cfg = load_config(["trainer.epochs=2"], presets=["examples/gsm8k/grpo.yaml"])   # preset files first

The schema (`schema.py`) declares every key once; `ppo_base_config.yaml` and
`docs/config_reference.md` are rendered from it (`python -m skyrl_train.config.render_yaml`).
Keys declared for upstream compatibility but not implemented here are listed in `support.py` and refused
unless left at their default.
"""

from skyrl_train.config.changes import added_keys, config_changes, format_config_changes
from skyrl_train.config.errors import ConfigError
from skyrl_train.config.loader import (
    BASE_CONFIG_PATH,
    CONFIG_DIR,
    CONFIG_NAME,
    LoadedConfig,
    build_config,
    load_config,
    resolve_config,
)
from skyrl_train.config.presets import split_cli_args
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
    "added_keys",
    "AlgorithmConfig",
    "BASE_CONFIG_PATH",
    "CONFIG_DIR",
    "CONFIG_NAME",
    "ConfigError",
    "DataConfig",
    "EnvironmentConfig",
    "GeneratorConfig",
    "LoadedConfig",
    "SamplingParams",
    "SkyRLConfig",
    "SkyRLGymConfig",
    "TrainerConfig",
    "build_config",
    "config_changes",
    "critic_dp_size",
    "format_config_changes",
    "load_config",
    "policy_dp_size",
    "resolve_config",
    "split_cli_args",
    "to_dict",
    "validate_cfg",
]
