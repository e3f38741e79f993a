"""skyrl_gym: Gymnasium-style text environments and tool groups for multi-turn RL on language models.

The public contract matches upstream skyrl-gym (`Env`, `BaseTextEnv`, `register` / `make`, `@tool`,
`ToolGroup`, per-class metrics aggregation), so envs written for upstream run here unchanged. Additions:
async env hooks, a typed infrastructure-failure report (`InfraFailure`), env discovery through the
`skyrl_gym.envs` entry-point group, idempotent `close`.
"""

from skyrl_gym import envs, error, tools
from skyrl_gym.core import Env, EnvStepOutput, InfraFailure, InfraFailureReason, call_hook, implements_async
from skyrl_gym.envs.registration import (
    EnvSpec,
    config_keys,
    deregister,
    load_entry_point_envs,
    make,
    pprint_registry,
    register,
    registry,
    spec,
)

__version__ = "0.2.0"

__all__ = [
    "Env",
    "EnvSpec",
    "EnvStepOutput",
    "InfraFailure",
    "InfraFailureReason",
    "call_hook",
    "config_keys",
    "deregister",
    "envs",
    "error",
    "implements_async",
    "load_entry_point_envs",
    "make",
    "pprint_registry",
    "register",
    "registry",
    "spec",
    "tools",
]
