"""Generators: turn a batch of prompts into trajectories by running agent loops against envs and engines."""

from skyrl_train.generators.base import (
    BatchMetadata,
    GeneratorInput,
    GeneratorInterface,
    GeneratorOutput,
    TrajectoryID,
    TrajectoryStopReason,
)

__all__ = [
    "BatchMetadata",
    "GeneratorInput",
    "GeneratorInterface",
    "GeneratorOutput",
    "TrajectoryID",
    "TrajectoryStopReason",
]
