"""Driver-side handles of the FSDP2 worker groups, with the single-process workers' interface.

``PPOTrainer`` calls ``policy.compute_logprobs / ppo_train / save_checkpoint / load_checkpoint / export_hf``,
``ref.compute_logprobs`` and ``critic.compute_values / ppo_train / save_checkpoint / load_checkpoint``; the
classes here do the same over a group of Ray actors (batches split as ``sharding`` says), so the trainer does not
know which strategy runs. ``build_fsdp_workers`` places and builds the groups from the config.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from skyrl_train.distributed.actor_group import ActorGroup
from skyrl_train.distributed.cluster import init_ray
from skyrl_train.distributed.placement import create_placement_groups, plan_placement
from skyrl_train.distributed.sharding import shard_for_update, split_rows
from skyrl_train.distributed.worker_actors import CriticActor, PolicyActor, RefActor
from skyrl_train.training_batch import TrainingInputBatch

__all__ = ["CriticWorkerGroup", "PolicyWorkerGroup", "RefWorkerGroup", "build_fsdp_workers"]

logger = logging.getLogger(__name__)


class _WorkerGroup:
    def __init__(self, actors: ActorGroup):
        self.actors = actors

    @property
    def world_size(self) -> int:
        return self.actors.world_size

    def _forward(self, method: str, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        shards = split_rows(batch, self.world_size)
        return torch.cat(self.actors.run_per_rank(method, [(shard, micro_batch_size) for shard in shards]))


class _TrainableGroup(_WorkerGroup):
    def ppo_train(
        self, batch: TrainingInputBatch, mini_batch_size: int, micro_batch_size: int, update_epochs: int = 1
    ) -> dict[str, float]:
        """``TrainableWorker.ppo_train`` over the group; the metrics are global (every rank returns the same)."""
        shards, local_mini = shard_for_update(batch, mini_batch_size, self.world_size)
        results = self.actors.run_per_rank(
            "ppo_train", [(shard, local_mini, micro_batch_size, update_epochs) for shard in shards]
        )
        return results[0]

    def save_checkpoint(self, folder: str | Path) -> None:
        self.actors.run("save_checkpoint", str(folder))

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """The full trainable weights (LoRA: the adapter; else every weight), gathered from the ranks."""
        return self.actors.run("trainable_state_dict")[0]

    def load_checkpoint(self, folder: str | Path) -> None:
        self.actors.run("load_checkpoint", str(folder))


class PolicyWorkerGroup(_TrainableGroup):
    """The policy over its ranks (``PolicyWorker``'s interface)."""

    def __init__(self, actors: ActorGroup, uses_lora: bool):
        super().__init__(actors)
        self.uses_lora = uses_lora
        self.after_load: list[Callable[[], None]] = []
        """Called after ``load_checkpoint`` (e.g. ``DriverPolicyCopy.sync``: the weights changed)."""

    def compute_logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        return self._forward("compute_logprobs", batch, micro_batch_size)

    def load_checkpoint(self, folder: str | Path) -> None:
        super().load_checkpoint(folder)
        for callback in self.after_load:
            callback()

    def export_hf(self, folder: str | Path) -> None:
        self.actors.run("export_hf", str(folder))


class RefWorkerGroup(_WorkerGroup):
    """Reference logprobs (``RefWorker``'s interface): separate ref actors, or the LoRA policy's adapter-free base."""

    def __init__(self, actors: ActorGroup, method: str = "compute_logprobs"):
        super().__init__(actors)
        self.method = method

    def compute_logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        return self._forward(self.method, batch, micro_batch_size)


class CriticWorkerGroup(_TrainableGroup):
    """The critic over its ranks (``CriticWorker``'s interface)."""

    def compute_values(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        return self._forward("compute_values", batch, micro_batch_size)


def build_fsdp_workers(
    trainer_config: Any, temperature: float, num_training_steps: int | None
) -> tuple[PolicyWorkerGroup, RefWorkerGroup | None, CriticWorkerGroup | None]:
    """Connect to Ray, reserve ``trainer.placement``, start and build the policy / ref / critic groups.

    The ref group exists when a KL term is on; with LoRA it is the policy's own actors (adapter disabled), as in the
    single-process ``RefWorker.for_policy``. The critic exists when ``trainer.critic.model.path`` is set.
    """
    import ray

    t = trainer_config
    init_ray()
    uses_lora = int(t.policy.model.lora.rank) > 0
    needs_ref = t.algorithm.use_kl_loss or t.algorithm.use_kl_in_reward
    if uses_lora and needs_ref and str(t.ref.model.path or t.policy.model.path) != str(t.policy.model.path):
        raise ValueError(
            f"with LoRA the reference is the policy's base model {t.policy.model.path!r}; "
            f"trainer.ref.model.path={t.ref.model.path!r} differs"
        )
    roles = ["policy"]
    if needs_ref and not uses_lora:
        roles.append("ref")
    if t.critic.model.path:
        roles.append("critic")
    use_gpu = ray.cluster_resources().get("GPU", 0) > 0
    reserved = create_placement_groups(plan_placement(t.placement, roles, use_gpu))
    actor_classes = {"policy": PolicyActor, "ref": RefActor, "critic": CriticActor}
    groups = {role: ActorGroup(actor_classes[role], placement) for role, placement in reserved.items()}
    for group in groups.values():
        group.init_process_group()
    pending = [actor.build.remote(t, temperature, num_training_steps) for actor in groups["policy"].actors]
    if "ref" in groups:
        pending += [actor.build.remote(t, temperature) for actor in groups["ref"].actors]
    if "critic" in groups:
        pending += [actor.build.remote(t, num_training_steps) for actor in groups["critic"].actors]
    ray.get(pending)
    logger.info("fsdp2 workers ready: %s", {role: group.world_size for role, group in groups.items()})
    policy = PolicyWorkerGroup(groups["policy"], uses_lora)
    ref = None
    if needs_ref:
        ref = (
            RefWorkerGroup(groups["ref"])
            if "ref" in groups
            else RefWorkerGroup(groups["policy"], "compute_ref_logprobs")
        )
    critic = CriticWorkerGroup(groups["critic"]) if "critic" in groups else None
    return policy, ref, critic
