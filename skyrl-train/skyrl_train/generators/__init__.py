"""Generators: turn a batch of prompts into trajectories by running agent loops against envs and engines."""

from skyrl_train.generators.base import (
    BatchMetadata,
    GeneratorInput,
    GeneratorInterface,
    GeneratorOutput,
    TrajectoryConversation,
    TrajectoryID,
)
from skyrl_train.generators.env_runner import EnvRunner, EnvSession, InfraFailed
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.generators.utils import apply_overlong_filtering, get_rollout_metrics, zero_rewards_on_non_stop

__all__ = [
    "BatchMetadata",
    "EnvRunner",
    "EnvSession",
    "GeneratorInput",
    "GeneratorInterface",
    "GeneratorOutput",
    "InfraFailed",
    "SkyRLGymGenerator",
    "TrajectoryConversation",
    "TrajectoryID",
    "apply_overlong_filtering",
    "get_rollout_metrics",
    "zero_rewards_on_non_stop",
]
