"""The generator contract (upstream's `GeneratorInput` / `GeneratorOutput` shapes, kept exactly).

A generator returns, per trajectory, the prompt token ids and the response token ids exactly as
sampled (token-in/token-out), a loss mask of the same length (1 only on sampled tokens), rewards
(per token, each turn's reward on that turn's last sampled token), rollout logprobs and a stop reason.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any, Literal, TypedDict

from skyrl_gym import InfraFailure
from skyrl_gym.envs.base_text_env import ConversationType
from skyrl_train.inference_engines.base import SamplingParams


@dataclasses.dataclass(frozen=True)
class TrajectoryID:
    instance_id: str
    """The prompt's uid (dataset row index as a string)."""
    repetition_id: int
    """Which of the `n_samples_per_prompt` samples of that prompt."""

    def to_string(self) -> str:
        return f"{self.instance_id}_{self.repetition_id}"


@dataclasses.dataclass
class TrajectoryConversation:
    """A trajectory as role/content messages, as the generator saw them (text, not re-tokenised)."""

    prompt: ConversationType
    """The prompt after the env's `init`."""
    response: ConversationType = dataclasses.field(default_factory=list)
    """Each turn's assistant text followed by the env's observation messages, the final observation included
    (it is not part of the response tokens)."""


@dataclasses.dataclass(frozen=True)
class BatchMetadata:
    global_step: int | None
    training_phase: Literal["train", "eval"]


class GeneratorInput(TypedDict, total=False):
    prompts: list[ConversationType]
    env_classes: list[str]
    env_extras: list[dict[str, Any]] | None
    sampling_params: SamplingParams | None
    trajectory_ids: list[TrajectoryID] | None
    batch_metadata: BatchMetadata | None


class GeneratorOutput(TypedDict, total=False):
    prompt_token_ids: list[list[int]]
    response_ids: list[list[int]]
    rewards: list[float] | list[list[float]]
    """Per response (scalar) or per token (same length as the response)."""
    loss_masks: list[list[int]]
    stop_reasons: list[str] | None
    rollout_metrics: dict[str, Any] | None
    rollout_logprobs: list[list[float]] | None
    trajectory_ids: list[TrajectoryID] | None
    is_last_step: list[bool] | None
    """Step-wise mode only: True on the row holding a trajectory's final turn."""
    env_metrics: list[dict[str, Any]] | None
    """Per trajectory: the env's `get_metrics()` plus the generator's own counters."""
    conversations: list[TrajectoryConversation | None] | None
    """Per trajectory (on its last row in step-wise mode, None on the others): its messages, for inspection
    and eval dumps only (training uses the token ids)."""
    weight_versions: list[int | None] | None
    """Per row: the weight version that generated its tokens (the oldest, if its turns were generated with several),
    as the engine reported it; None where no token was generated or the engine could not tell."""
    infra_failures: list[InfraFailure | None] | None
    """Per row: the infrastructure failure its trajectory ended in (on the trajectory's last row; None on the others
    and for trajectories without one). Its reason is also the row's stop reason."""


class GeneratorInterface(ABC):
    @abstractmethod
    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        """One output row per input (in input order), except in step-wise mode (one row per turn)."""
