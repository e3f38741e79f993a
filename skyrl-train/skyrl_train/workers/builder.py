"""`WorkerBuilder`: the one place that turns the trainer config into policy, critic and reference workers.

Each worker's arguments from the config (its section: model path, LoRA, optimizer, model config kwargs; the
algorithm; gradient checkpointing; sample packing; the sampling temperature) and from the run (optimizer steps,
dtype, device, autocast) are assembled here. The single-process strategy builds the workers as they are; an fsdp2 rank
(`skyrl_train.distributed.worker_actors`) passes its sharded worker class and shards the separate reference, and
adds nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skyrl_train.workers.critic import CriticWorker
from skyrl_train.workers.policy import PolicyWorker
from skyrl_train.workers.ref import RefWorker

if TYPE_CHECKING:
    import torch

    from skyrl_train.config.schema import TrainerConfig

__all__ = ["WorkerBuilder"]


@dataclass(frozen=True)
class WorkerBuilder:
    """Builds a run's workers from ``trainer`` (the `trainer` config section)."""

    trainer: TrainerConfig
    temperature: float
    """``generator.sampling_params.temperature``: the policy and the reference divide their logits by it."""
    num_training_steps: int | None
    """Optimizer steps of the whole run, for LR schedulers that decay (None: the worker never trains, e.g. an
    export or a reference)."""
    dtype: torch.dtype | str
    device: torch.device | str
    autocast_dtype: torch.dtype | None = None
    """The forwards of every worker run under autocast to it over ``dtype`` weights (`utils.device.Precision`)."""

    def policy(self, worker_class: Callable[..., PolicyWorker] = PolicyWorker) -> PolicyWorker:
        """The policy; ``worker_class`` is called as ``PolicyWorker`` is (an fsdp2 rank binds its sharding to it)."""
        t = self.trainer
        return worker_class(
            t.policy,
            t.algorithm,
            temperature=self.temperature,
            sample_packing=t.use_sample_packing,
            **self._trainable_arguments(),
        )

    def critic(self, worker_class: Callable[..., CriticWorker] = CriticWorker) -> CriticWorker:
        """The critic (``trainer.critic.model.path`` must be set); ``worker_class`` as for ``policy``."""
        t = self.trainer
        return worker_class(t.critic, t.algorithm, **self._trainable_arguments())

    def reference(self, policy: PolicyWorker) -> RefWorker:
        """``policy``'s reference: with LoRA the policy's own module with its adapter off (`RefWorker.for_policy`,
        which refuses a ``trainer.ref.model.path`` other than the policy's), else ``separate_reference()``."""
        if policy.uses_lora:
            return RefWorker.for_policy(policy, self.trainer.ref)
        return self.separate_reference()

    def separate_reference(self) -> RefWorker:
        """A frozen model of its own: ``trainer.ref.model.path`` (the policy's path when unset)."""
        t = self.trainer
        return RefWorker.from_pretrained(
            t.ref.model.path or t.policy.model.path,
            temperature=self.temperature,
            dtype=self.dtype,
            device=self.device,
            model_config_kwargs=t.ref.model_config_kwargs,
            sample_packing=t.use_sample_packing,
            autocast_dtype=self.autocast_dtype,
        )

    def _trainable_arguments(self) -> dict[str, Any]:
        """The keyword arguments the policy and the critic share."""
        t = self.trainer
        return dict(
            num_training_steps=self.num_training_steps,
            gradient_checkpointing=t.gradient_checkpointing,
            gradient_checkpointing_use_reentrant=t.gradient_checkpointing_use_reentrant,
            dtype=self.dtype,
            device=self.device,
            autocast_dtype=self.autocast_dtype,
        )
