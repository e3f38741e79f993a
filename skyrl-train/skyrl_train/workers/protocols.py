"""The policy, reference and critic workers as the trainer drives them: one `typing.Protocol` each.

A strategy (`skyrl_train.strategies`) builds them: in this process (`PolicyWorker`, `RefWorker`, `CriticWorker`) or
as driver-side handles of Ray actor groups (fsdp2's `PolicyWorkerGroup`, `RefWorkerGroup`, `CriticWorkerGroup`).
Either way `PPOTrainer` calls only the members below, so it never knows which strategy runs. Batches go in as
`TrainingInputBatch` objects on any device; tensors come back on the CPU.

The protocols are `runtime_checkable`, so ``isinstance(worker, Policy)`` checks that the members exist (not their
signatures).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

import torch

from skyrl_train.training_batch import TrainingInputBatch

__all__ = ["Critic", "Policy", "Reference", "Trainable", "Workers"]


@runtime_checkable
class Trainable(Protocol):
    """What the policy and the critic share: the PPO update, checkpoints and the trainable weights."""

    def ppo_train(
        self, batch: TrainingInputBatch, mini_batch_size: int, micro_batch_size: int, update_epochs: int = 1
    ) -> dict[str, float]:
        """One PPO update on ``batch`` (mini-batches of ``mini_batch_size`` rows); the prefixed step metrics."""
        ...

    def save_checkpoint(self, folder: str | Path) -> None:
        """Write the trainable weights, optimizer, scheduler and RNG states into ``folder``."""
        ...

    def load_checkpoint(self, folder: str | Path) -> None:
        """Restore what ``save_checkpoint`` wrote."""
        ...

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """The full trainable weights (LoRA: the adapter; else every weight)."""
        ...


@runtime_checkable
class Policy(Trainable, Protocol):
    """The trained policy: old logprobs, updates, checkpoints, HF export; the weight sync's source of weights."""

    uses_lora: bool
    """Only a LoRA adapter trains (the base model stays frozen)."""

    def compute_logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        """Logprobs ``[B, R]`` of the response tokens under the current weights (no grad)."""
        ...

    def export_hf(self, folder: str | Path) -> None:
        """Save a plain transformers model (LoRA merged) with the tokenizer into ``folder``."""
        ...

    def sft_train(self, batch: TrainingInputBatch, micro_batch_size: int) -> dict[str, float]:
        """One supervised fine-tuning step (``cross_entropy``, one optimizer step); its unprefixed metrics."""
        ...

    def sft_eval(self, batch: TrainingInputBatch, micro_batch_size: int) -> dict[str, float]:
        """The SFT loss and token accuracy of ``batch`` under the current weights, without training."""
        ...


@runtime_checkable
class Reference(Protocol):
    """The frozen reference model: logprobs for the KL term."""

    world_size: int
    """Data-parallel ranks the forward is split over: a batch given to it has a multiple of this many rows."""

    def compute_logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        """Reference logprobs ``[B, R]`` of the response tokens (no grad)."""
        ...


@runtime_checkable
class Critic(Trainable, Protocol):
    """The critic of ``gae``: values and value-loss updates."""

    def compute_values(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        """Values ``[B, R]`` of the response tokens (no grad)."""
        ...


class Workers(NamedTuple):
    """A run's workers, as a strategy builds them: the reference exists when a KL term is on
    (`TrainerConfig.needs_ref`), the critic when ``trainer.critic.model.path`` is set."""

    policy: Policy
    ref: Reference | None
    critic: Critic | None
