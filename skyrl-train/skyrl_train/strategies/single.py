"""``trainer.strategy=single``: the policy, reference and critic workers in this process, on ``trainer.device``."""

from __future__ import annotations

from skyrl_train.strategies.base import EnginePolicy, Strategy
from skyrl_train.workers.builder import WorkerBuilder
from skyrl_train.workers.protocols import Policy, Workers

__all__ = ["SingleProcess"]


class SingleProcess(Strategy):
    """Every worker in this process; a local hf engine generates from the policy's own module (shared, so nothing is
    synced)."""

    name = "single"
    driver_models = "the workers and the hf engine"

    def worker_builder(self, num_training_steps: int | None) -> WorkerBuilder:
        """The builder of this run's workers, on ``device`` with ``precision``."""
        return WorkerBuilder(
            self.cfg.trainer,
            temperature=self.cfg.generator.sampling_params.temperature,
            num_training_steps=num_training_steps,
            dtype=self.dtype,
            device=self.device,
            autocast_dtype=self.precision.autocast,
        )

    def build_workers(self, num_training_steps: int | None) -> Workers:
        t = self.cfg.trainer
        builder = self.worker_builder(num_training_steps)
        policy = builder.policy()
        ref = builder.reference(policy) if t.needs_ref else None
        critic = builder.critic() if t.critic.model.path else None
        return Workers(policy, ref, critic)

    def release_workers(self, workers: Workers) -> None:
        """Nothing: the workers hold nothing outside this process."""

    def engine_policy(self, policy: Policy) -> EnginePolicy:
        return EnginePolicy(policy, None)
