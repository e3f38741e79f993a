"""Driver-side handles of the FSDP2 worker groups, with the single-process workers' interface.

``PPOTrainer`` drives the policy, ref and critic through ``skyrl_train.workers.protocols`` (``Policy``,
``Reference``, ``Critic``); the classes here implement them over a group of Ray actors (batches split as
``sharding`` says), so the trainer does not know which strategy runs. ``build_fsdp_workers`` places and builds the
groups from the config (for ``skyrl_train.strategies.FSDP2``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from skyrl_train.checkpoints.manager import CheckpointError, step_dir_name, written_step
from skyrl_train.distributed.actor_group import ActorGroup
from skyrl_train.distributed.checkpoint_storage import RankStorage, probe_checkpoint_storage
from skyrl_train.distributed.placement import create_placement_groups, plan_placement, remove_placement_groups
from skyrl_train.distributed.sharding import shard_for_update, split_rows
from skyrl_train.distributed.worker_actors import CriticActor, PolicyActor, RefActor
from skyrl_train.storage import ManifestEntry, S3Settings, join_key
from skyrl_train.storage.rank_uploads import RANK_UPLOADS_FILE, RankUploads
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.types.weight_sync_requests import CudaIpcWeightUpdateRequest, TensorSpec
from skyrl_train.utils.ray_cluster import init_ray
from skyrl_train.weight_sync.cuda_ipc import merge_requests
from skyrl_train.workers.protocols import Workers

if TYPE_CHECKING:
    from skyrl_train.config.schema import TrainerConfig

__all__ = [
    "CriticWorkerGroup",
    "PolicyWorkerGroup",
    "RefWorkerGroup",
    "build_fsdp_workers",
    "fsdp2_roles",
    "release_workers",
]

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

    checkpoint_s3: S3Settings | None = None
    """Set by ``use_checkpoint_storage`` when the ranks' files go through S3 (nodes without a shared ckpt_path)."""

    def use_checkpoint_storage(self, storages: list[RankStorage]) -> None:
        """Tell each rank where its checkpoint files go (``probe_checkpoint_storage``'s answer)."""
        self.actors.run_per_rank("set_checkpoint_storage", [(storage,) for storage in storages])
        self.checkpoint_s3 = storages[0].s3

    def save_checkpoint(self, folder: str | Path) -> None:
        """Every rank writes its part of ``folder``. Per node (S3), the ranks upload their files to the step's S3
        prefix and ``folder`` receives the list of them (``UPLOADED_BY_RANKS.json``)."""
        folder = Path(folder)
        s3 = self.checkpoint_s3
        if s3 is None:
            self.actors.run("save_checkpoint", str(folder))
            return
        step = written_step(folder.parent)
        if step is None:
            raise CheckpointError(f"{folder}: fsdp2 ranks that upload their own files save into global_step_N/<role>")
        prefix = join_key(s3.run_prefix(), step_dir_name(step), folder.name)
        uploaded = [entry for entries in self.actors.run("save_checkpoint", str(folder), prefix) for entry in entries]
        folder.mkdir(parents=True, exist_ok=True)
        RankUploads(s3.bucket, prefix, tuple(sorted(uploaded, key=lambda entry: entry.path))).write(folder)
        logger.info("the ranks uploaded %d checkpoint files to s3://%s/%s/", len(uploaded), s3.bucket, prefix)

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """The full trainable weights (LoRA: the adapter; else every weight), gathered from the ranks."""
        return self.actors.run("trainable_state_dict")[0]

    def load_checkpoint(self, folder: str | Path) -> None:
        """Every rank loads ``folder``; per node (S3), from the files its listing names (or, for a checkpoint saved
        on one filesystem, from the step's S3 copy), downloaded onto every node first."""
        folder = Path(folder)
        if self.checkpoint_s3 is None:
            self.actors.run("load_checkpoint", str(folder))
            return
        source = RankUploads.read(folder) or _s3_copy(self.checkpoint_s3, folder)
        self.actors.run("load_checkpoint", str(folder), source)


class PolicyWorkerGroup(_TrainableGroup):
    """The policy over its ranks (``PolicyWorker``'s interface)."""

    uses_lora: bool
    """Only a LoRA adapter trains (``trainer.policy.model.lora.rank > 0``)."""

    def __init__(self, actors: ActorGroup, uses_lora: bool):
        super().__init__(actors)
        self.uses_lora = uses_lora
        self.after_load: list[Callable[[], None]] = []
        """Called after ``load_checkpoint`` (e.g. ``DriverPolicyCopy.sync``: the weights changed)."""

    def compute_logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        return self._forward("compute_logprobs", batch, micro_batch_size)

    def sft_train(self, batch: TrainingInputBatch, micro_batch_size: int) -> dict[str, float]:
        """``PolicyWorker.sft_train`` over the group: rank r trains the r-th equal part of ``batch``; the metrics are
        global (every rank returns the same)."""
        return self._run_split("sft_train", batch, micro_batch_size)

    def sft_eval(self, batch: TrainingInputBatch, micro_batch_size: int) -> dict[str, float]:
        """``PolicyWorker.sft_eval`` over the group, split as ``sft_train``."""
        return self._run_split("sft_eval", batch, micro_batch_size)

    def _run_split(self, method: str, batch: TrainingInputBatch, micro_batch_size: int) -> dict[str, float]:
        shards = split_rows(batch, self.world_size)
        return self.actors.run_per_rank(method, [(shard, micro_batch_size) for shard in shards])[0]

    def load_checkpoint(self, folder: str | Path) -> None:
        super().load_checkpoint(folder)
        for callback in self.after_load:
            callback()

    def export_hf(self, folder: str | Path) -> None:
        self.actors.run("export_hf", str(folder))

    # CUDA IPC weight sync (``weight_sync.cuda_ipc.CudaIpcSource``): the ranks pack on their GPUs, the driver only
    # relays names, shapes and handles.

    def weight_specs(self) -> list[TensorSpec]:
        return self.actors.run("weight_specs")[0]

    def pack_cuda_ipc(self, names: list[str], weight_version: int) -> CudaIpcWeightUpdateRequest:
        """Every rank packs the named weights on its GPU (gathering each in turn); one request with all handles."""
        return merge_requests(self.actors.run("pack_cuda_ipc", names, weight_version))

    def release_cuda_ipc(self) -> None:
        self.actors.run("release_cuda_ipc")


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


def _s3_copy(s3: S3Settings, role_folder: Path) -> RankUploads:
    """The S3 copy of a role folder saved on one filesystem (no listing): the step's complete upload under this
    run's prefix, else under ``trainer.resume_run_name``'s (the order the S3 sink fetches in)."""
    step = written_step(role_folder.parent)
    store = s3.store()
    prefixes = [s3.run_prefix()] + ([s3.run_prefix(s3.resume_run_name)] if s3.resume_run_name else [])
    for run_prefix in prefixes if step is not None else []:
        manifest = store.read_manifest(join_key(run_prefix, step_dir_name(step)))
        if manifest is not None:
            role = f"{role_folder.name}/"
            files = tuple(
                ManifestEntry(e.path.removeprefix(role), e.size, e.sha256)
                for e in manifest.files
                if e.path.startswith(role)
            )
            return RankUploads(s3.bucket, join_key(run_prefix, step_dir_name(step), role_folder.name), files)
    raise CheckpointError(
        f"{role_folder} has no {RANK_UPLOADS_FILE} and no complete S3 copy under {prefixes}: the ranks on other "
        "nodes cannot read it (resume it where its ranks shared one filesystem)"
    )


def fsdp2_roles(trainer_config: TrainerConfig) -> list[str]:
    """The worker groups an fsdp2 run places: the policy; a reference of its own (``separate_ref_model``: with LoRA
    the policy's actors serve the reference); a critic when ``trainer.critic.model.path`` is set."""
    t = trainer_config
    return ["policy", *(["ref"] if t.separate_ref_model else []), *(["critic"] if t.critic.model.path else [])]


def build_fsdp_workers(
    trainer_config: TrainerConfig,
    temperature: float,
    num_training_steps: int | None,
    *,
    checkpoints: bool = False,
    s3: S3Settings | None = None,
) -> Workers:
    """Connect to Ray, reserve ``trainer.placement``, start and build the policy / ref / critic groups.

    The ref exists when a KL term is on (``needs_ref``); with LoRA it is the policy's own actors (adapter disabled), as
    in the single-process strategy. The critic exists when ``trainer.critic.model.path`` is set. Every rank builds
    its worker with ``WorkerBuilder`` (``worker_actors``).
    With ``checkpoints`` (the run saves or resumes), the trainable groups first probe where their ranks can keep
    checkpoint files (``checkpoint_storage``): through ``s3`` (the run's S3 settings) when the nodes do not share
    ``trainer.ckpt_path``, refused without S3. On failure nothing stays reserved or alive.
    """
    import ray

    t = trainer_config
    init_ray()
    use_gpu = ray.cluster_resources().get("GPU", 0) > 0
    reserved = create_placement_groups(plan_placement(t.placement, fsdp2_roles(t), use_gpu))
    actor_classes = {"policy": PolicyActor, "ref": RefActor, "critic": CriticActor}
    groups: dict[str, ActorGroup] = {}
    try:
        for role, placement in reserved.items():
            groups[role] = ActorGroup(actor_classes[role], placement)
        storages = {}
        for role in ("policy", "critic") if checkpoints else ():
            if role in groups:
                storages[role] = probe_checkpoint_storage(groups[role], t.ckpt_path, s3, role, t.run_name)
        for group in groups.values():
            group.init_process_group()
        ray.get(
            [
                actor.build.remote(t, temperature, num_training_steps)
                for group in groups.values()
                for actor in group.actors
            ]
        )
        policy = PolicyWorkerGroup(groups["policy"], uses_lora=t.policy.model.lora.rank > 0)
        critic = CriticWorkerGroup(groups["critic"]) if "critic" in groups else None
        for role, group in (("policy", policy), ("critic", critic)):
            if role in storages:
                group.use_checkpoint_storage(storages[role])
    except BaseException:  # a failed build leaves no actor alive and nothing reserved
        for group in groups.values():
            group.kill()
        remove_placement_groups(placement.placement_group for placement in reserved.values())
        raise
    logger.info("fsdp2 workers ready: %s", {role: group.world_size for role, group in groups.items()})
    ref = None
    if t.needs_ref:
        ref = (
            RefWorkerGroup(groups["ref"])
            if "ref" in groups
            else RefWorkerGroup(groups["policy"], "compute_ref_logprobs")
        )
    return Workers(policy, ref, critic)


def release_workers(*workers: Any) -> None:
    """Kill the actors of the fsdp2 worker groups among ``workers`` and remove their placement groups; single-process
    workers and None are skipped, and a group already released (or shared, like the LoRA ref) is released once."""
    for worker in workers:
        if isinstance(worker, _WorkerGroup):
            worker.actors.kill()
