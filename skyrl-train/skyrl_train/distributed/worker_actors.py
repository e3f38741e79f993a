"""The Ray actors of ``trainer.strategy=fsdp2``: one per rank, holding that rank's FSDP2 worker.

Plain classes (``ActorGroup`` applies ``ray.remote``) with plain methods. Each is built in two calls after the
process group exists (``ActorGroup.init_process_group``): ``build(trainer_config, temperature, num_training_steps)``,
then the work methods. ``build`` takes the worker's arguments from ``WorkerBuilder`` (as the single-process strategy
does) and adds the sharding. Batches arrive on CPU; the workers move them to the actor's device and return tensors
on the CPU.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

from skyrl_train.checkpoints.manager import CheckpointError
from skyrl_train.config.schema import TrainerConfig
from skyrl_train.distributed.actor_group import DistributedActor
from skyrl_train.distributed.checkpoint_storage import RankStorage, read_probe, remove_probe, write_probe
from skyrl_train.distributed.fsdp import FSDPSetup, all_gather_objects
from skyrl_train.distributed.fsdp_workers import FSDPCriticWorker, FSDPPolicyWorker, shard_reference
from skyrl_train.storage import ManifestEntry
from skyrl_train.storage.rank_uploads import RankUploads
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.types.weight_sync_requests import CudaIpcWeightUpdateRequest, TensorSpec
from skyrl_train.utils.device import precision
from skyrl_train.utils.fs import remove_tree
from skyrl_train.weight_sync.cuda_ipc import ModuleIpcSource
from skyrl_train.workers.builder import WorkerBuilder

__all__ = ["CriticActor", "PolicyActor", "RefActor", "model_dtype"]


def model_dtype(trainer_config: TrainerConfig, device: str) -> torch.dtype:
    """Weights' dtype: fp32 masters on GPU (bf16 compute comes from FSDP mixed precision); on CPU as ``single``, fp32
    (bf16 compute comes from autocast where `utils.device.precision` says so for the rank's own CPU)."""
    return torch.float32 if device == "cuda" else trainer_config.training_dtype(device)


class _WorkerActor(DistributedActor):
    def build(self, trainer_config: TrainerConfig, temperature: float, num_training_steps: int | None) -> None:
        """Seed this rank (every rank must initialise e.g. LoRA weights identically: each shards its own copy), then
        build its worker from the config (``_build``)."""
        torch.manual_seed(trainer_config.seed)
        builder = WorkerBuilder(
            trainer_config,
            temperature=temperature,
            num_training_steps=num_training_steps,
            dtype=model_dtype(trainer_config, self.device),
            device=self.device,
            autocast_dtype=precision(trainer_config.bf16, self.device).autocast,
        )
        self._build(builder)

    def _build(self, builder: WorkerBuilder) -> None:
        raise NotImplementedError

    def ppo_train(
        self, batch: TrainingInputBatch, mini_batch_size: int, micro_batch_size: int, update_epochs: int
    ) -> dict[str, float]:
        return self.worker.ppo_train(batch, mini_batch_size, micro_batch_size, update_epochs)

    # --------------------------------------------------------------- checkpoints (see checkpoint_storage)

    ckpt_storage: RankStorage | None = None
    """Set after the start-up probe; None: write to and read from the folders given (one machine)."""

    def write_checkpoint_probe(self, ckpt_path: str, probe: str) -> str:
        return write_probe(ckpt_path, probe, self.rank)

    def read_checkpoint_probe(self, ckpt_path: str, probe: str) -> list[str]:
        return read_probe(ckpt_path, probe)

    def remove_checkpoint_probe(self, ckpt_path: str, probe: str) -> None:
        remove_probe(ckpt_path, probe)

    def set_checkpoint_storage(self, storage: RankStorage) -> None:
        self.ckpt_storage = storage
        if storage.s3 is not None and storage.leader:
            storage.clear_scratch()

    def save_checkpoint(self, folder: str, upload_prefix: str | None = None) -> list[ManifestEntry]:
        """Write this rank's part of the checkpoint ``folder``; per node, the leaders upload their scratch folder to
        ``upload_prefix`` and return what they uploaded."""
        storage = self.ckpt_storage
        if storage is None or storage.s3 is None:
            local = storage.folder(folder) if storage else Path(folder)
            local.mkdir(parents=True, exist_ok=True)
            self.worker.save_checkpoint(local)
            return []
        local = storage.scratch_folder("save")
        local.mkdir(parents=True, exist_ok=True)
        self.worker.save_checkpoint(local)  # ends with a barrier: every rank's files are written
        return storage.upload(local, upload_prefix) if storage.leader else []

    def load_checkpoint(self, folder: str, source: RankUploads | None = None) -> None:
        """Load the checkpoint ``folder``; per node, the leaders first download ``source`` into their scratch folder
        (a download error on any node stops every rank with it)."""
        storage = self.ckpt_storage
        if storage is None or storage.s3 is None:
            self.worker.load_checkpoint(storage.folder(folder) if storage else folder)
            return
        local = storage.scratch_folder("load")
        error = None
        if storage.leader:
            try:
                storage.download(source, local)
            except Exception as exc:  # noqa: BLE001 - every rank must leave the collective below with the error
                error = f"rank {self.rank}: {exc}"
        errors = [e for e in all_gather_objects(error) if e]
        if errors:
            raise CheckpointError(f"could not download checkpoint files from {source.url()}: {'; '.join(errors)}")
        self.worker.load_checkpoint(local)
        dist.barrier()
        if storage.leader:
            remove_tree(local)

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        return self.worker.trainable_state_dict()


class PolicyActor(_WorkerActor):
    """A policy rank; with LoRA and a KL term it also serves reference logprobs (the base model, adapter disabled)."""

    def _build(self, builder: WorkerBuilder) -> None:
        t = builder.trainer
        setup = FSDPSetup(t.policy.fsdp_config, self.device, t.bf16, "policy")
        self.worker = builder.policy(partial(FSDPPolicyWorker, setup, export_dtype=t.training_dtype(self.device)))
        self.ref = builder.reference(self.worker) if t.needs_ref and self.worker.uses_lora else None
        self.ipc = ModuleIpcSource(self.worker.model)

    # CUDA IPC weight sync (``weight_sync.cuda_ipc``): every rank packs a chunk on its own GPU for the engine there.

    def weight_specs(self) -> list[TensorSpec]:
        return self.ipc.weight_specs()

    def pack_cuda_ipc(self, names: list[str], weight_version: int) -> CudaIpcWeightUpdateRequest:
        return self.ipc.pack_cuda_ipc(names, weight_version)

    def release_cuda_ipc(self) -> None:
        self.ipc.release_cuda_ipc()

    def compute_logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        return self.worker.compute_logprobs(batch, micro_batch_size)

    def sft_train(self, batch: TrainingInputBatch, micro_batch_size: int) -> dict[str, float]:
        return self.worker.sft_train(batch, micro_batch_size)

    def sft_eval(self, batch: TrainingInputBatch, micro_batch_size: int) -> dict[str, float]:
        return self.worker.sft_eval(batch, micro_batch_size)

    def compute_ref_logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        if self.ref is None:
            raise RuntimeError("reference logprobs from the policy actors need a LoRA policy and a KL term")
        return self.ref.compute_logprobs(batch, micro_batch_size)

    def export_hf(self, folder: str) -> None:
        self.worker.export_hf(folder)


class RefActor(_WorkerActor):
    """A rank of a separate frozen reference model (full fine-tuning)."""

    def _build(self, builder: WorkerBuilder) -> None:
        setup = FSDPSetup(builder.trainer.ref.fsdp_config, self.device, builder.trainer.bf16, "ref")
        self.worker = shard_reference(builder.separate_reference(), setup)

    def compute_logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        return self.worker.compute_logprobs(batch, micro_batch_size)


class CriticActor(_WorkerActor):
    """A critic rank."""

    def _build(self, builder: WorkerBuilder) -> None:
        setup = FSDPSetup(builder.trainer.critic.fsdp_config, self.device, builder.trainer.bf16, "critic")
        self.worker = builder.critic(partial(FSDPCriticWorker, setup))

    def compute_values(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        return self.worker.compute_values(batch, micro_batch_size)
