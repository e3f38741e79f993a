"""``trainer.strategy=fsdp2``: the workers as groups of Ray actors, one FSDP2 rank each (``skyrl_train.distributed``).

Ray and ``torch.distributed`` are imported when the workers are built, not with this module.
"""

from __future__ import annotations

from typing import Any

from skyrl_train.config.support import engines_receive_weights
from skyrl_train.strategies.base import EnginePolicy, Strategy
from skyrl_train.workers.protocols import Policy, Workers

__all__ = ["FSDP2"]


class FSDP2(Strategy):
    """The policy, reference and critic as actor groups placed by ``trainer.placement`` (``build_fsdp_workers``).
    The ranks hold the weights, so a local hf engine generates from a copy of the policy in this process, on
    ``device``, synced from the ranks (``DriverPolicyCopy``)."""

    name = "fsdp2"
    driver_models = "the driver's hf engine copy"

    def build_workers(self, num_training_steps: int | None) -> Workers:
        from skyrl_train.distributed.worker_groups import build_fsdp_workers

        return build_fsdp_workers(
            self.cfg.trainer,
            self.cfg.generator.sampling_params.temperature,
            num_training_steps,
            checkpoints=self.checkpoints,
            s3=self.s3,
        )

    def release_workers(self, workers: Workers) -> None:
        """Kill the actors and remove their placement groups, so a driver that keeps running leaves nothing reserved
        on the cluster."""
        from skyrl_train.distributed.worker_groups import release_workers

        release_workers(*workers)

    def engine_placement(self, policy: Policy | None) -> tuple[Any, list[int]] | None:
        """The policy group's placement group and bundles: colocated vLLM engines share them."""
        if policy is None:
            return None
        return policy.actors.placement_group, policy.actors.bundle_of_rank

    def engine_policy(self, policy: Policy) -> EnginePolicy:
        """The local hf engine: a synced copy of the policy in this process. Engines that receive weight syncs (vLLM,
        remote servers): the policy group itself (colocated vLLM engines take its placement group)."""
        if engines_receive_weights(self.cfg):
            return EnginePolicy(policy, None)
        from skyrl_train.distributed.engine_sync import DriverPolicyCopy

        copy = DriverPolicyCopy(self.cfg.trainer.policy, policy, self.dtype, self.device)
        return EnginePolicy(copy, copy.sync)
