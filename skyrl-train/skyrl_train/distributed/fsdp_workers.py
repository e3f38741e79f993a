"""The policy, critic and reference workers of one FSDP2 rank: the single-process workers, sharded.

Each class reuses its single-process worker (loss, metrics, update loop) and changes only what spans ranks:

- the model is sharded with ``shard_model`` before the optimizer is built (``FSDPTrainable.__init__``);
- a mini-batch's ``MiniBatchInfo`` (loss normaliser, rows, masked tokens) is computed over the loss masks of all
  ranks, so each rank's micro-batch losses are its exact share of the global mini-batch loss; the loss is
  back-propagated times the world size because FSDP averages gradients over ranks;
- step metrics (additive contributions, ``_min`` / ``_max``) are combined over ranks like micro-batches are;
- a mini-batch is skipped for an all-zero loss mask only when it is empty on every rank, and a micro-batch skips its
  backward for a zero gradient only when it has one on every rank (the skips must agree: FSDP's backward is a
  collective);
- the gradient norm for clipping is the norm of the whole sharded gradient (``clip_grad_norm_`` on DTensors);
- the global values come from ``TrainableWorker``'s data-parallel hooks: ``_gather`` (an all-gather here) and
  ``_gradient_scale`` (the world size);
- checkpoints are ``torch.distributed.checkpoint`` folders, one file per rank, loadable on another world size;
  HF exports and weight-sync state dicts are gathered to rank 0.

Checkpoint folder of one model (e.g. ``global_step_N/policy/``)::

    model_optim/        DCP checkpoint: {"model": trainable weights, "optimizer": AdamW state}, sharded
    extra_state.pt      {"scheduler": LR scheduler state_dict, "rng": RNG states of each rank (list)}
    huggingface/        model config and tokenizer
    adapter/            LoRA only: the adapter in peft's format, written by rank 0 (``PolicyWorker.save_checkpoint``)

Neither is unpickled beyond plain data: ``extra_state.pt`` loads with ``weights_only=True``, the DCP folder through
`skyrl_train.distributed.dcp_load.load_dcp`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from skyrl_train.distributed.dcp_load import load_dcp
from skyrl_train.distributed.fsdp import FSDPSetup, all_gather_objects, shard_model
from skyrl_train.models import load_causal_lm
from skyrl_train.models.lora import ADAPTER_DIR, apply_lora
from skyrl_train.utils.plain_data import load_plain, save_plain
from skyrl_train.workers import CriticWorker, PolicyWorker, RefWorker
from skyrl_train.workers.trainable import EXTRA_STATE_FILE, HF_DIR, TrainableWorker, _rng_state, _set_rng_state

if TYPE_CHECKING:
    from skyrl_train.config.schema import AlgorithmConfig, CriticConfig, PolicyConfig

__all__ = ["FSDPCriticWorker", "FSDPPolicyWorker", "FSDPTrainable", "shard_reference", "DCP_DIR"]

logger = logging.getLogger(__name__)

DCP_DIR = "model_optim"


def _full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded weights on rank 0 (CPU), ``{}`` on other ranks; a collective: every rank must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


class FSDPTrainable(TrainableWorker):
    """``TrainableWorker`` over a sharded model. Subclasses set ``self._fsdp_setup`` before ``__init__`` runs."""

    _fsdp_setup: FSDPSetup
    uniform_forwards = True
    _forward_methods: tuple[str, ...] = ()
    """Methods of the model other than ``forward`` that run it (see ``shard_model``)."""

    def __init__(self, model: nn.Module, model_path: str, optimizer_config: Any, num_training_steps: int | None):
        shard_model(model, self._fsdp_setup, self._forward_methods)
        super().__init__(model, model_path, optimizer_config, num_training_steps)

    @property
    def _rank(self) -> int:
        return dist.get_rank()

    @property
    def _gradient_scale(self) -> int:
        return dist.get_world_size()

    def _gather(self, value: Any) -> list[Any]:
        return all_gather_objects(value)

    # ------------------------------------------------------------------------------------------ checkpoints

    def _trainable_only(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` restricted to the trainable parameters' names. (``ignore_frozen_params`` is not enough: it
        keeps a tied LM head whose shared weight is the frozen embedding.)"""
        return {name: value for name, value in state.items() if name in self._trainable}

    def _dcp_state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": self._trainable_only(model_state), "optimizer": optimizer_state}

    def save_checkpoint(self, folder: str | Path) -> None:
        """Every rank writes its shards; rank 0 also writes the scheduler, the RNG states and ``huggingface/``."""
        import torch.distributed.checkpoint as dcp

        folder = Path(folder)
        dcp.save(self._dcp_state(), checkpoint_id=str(folder / DCP_DIR))
        rng_states = all_gather_objects(_rng_state())
        if self._rank == 0:
            save_plain({"scheduler": self.scheduler.state_dict(), "rng": rng_states}, folder / EXTRA_STATE_FILE)
            self.model.config.save_pretrained(folder / HF_DIR)
            self._tokenizer().save_pretrained(folder / HF_DIR)
        dist.barrier()

    def load_checkpoint(self, folder: str | Path) -> None:
        """Restore a ``save_checkpoint`` folder, written with this or another world size (DCP reshards).

        RNG states: rank r takes the saved rank r's, or rank 0's when the checkpoint had fewer ranks.
        """
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        folder = Path(folder)
        state = self._dcp_state()
        load_dcp(state, folder / DCP_DIR)
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
            options=StateDictOptions(strict=False),  # frozen weights come from the model path
        )
        extra = load_plain(folder / EXTRA_STATE_FILE)
        self.scheduler.load_state_dict(extra["scheduler"])
        rng = extra["rng"]
        _set_rng_state(rng[self._rank] if self._rank < len(rng) else rng[0])

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """The full (unsharded) trainable weights on rank 0, ``{}`` elsewhere: what an inference engine needs."""
        return self._trainable_only(_full_state_dict(self.model))


class FSDPPolicyWorker(PolicyWorker, FSDPTrainable):
    """``PolicyWorker`` on one FSDP2 rank. ``setup`` says how to shard; ``export_dtype`` is the dtype of HF exports
    (the training dtype, ``utils.device.training_dtype``, as the single strategy exports, even where the sharded
    weights are fp32 masters for GPU mixed precision); other arguments as ``PolicyWorker``.

    Every pass runs every row through the whole model, never a shared prompt prefix once (``uniform_forwards``, from
    ``FSDPTrainable``): whether rows share a prefix depends on the rank's rows, and the ranks must run the same
    forwards. In the update it could not work anyway: that takes two forward passes through the same blocks in one
    graph (the prefix's keys/values feed the rows' pass), and FSDP frees a block's gathered weights after its first
    backward, before the prefix's part of the graph reaches it again.
    """

    def __init__(
        self,
        setup: FSDPSetup,
        policy_config: PolicyConfig,
        algorithm_config: AlgorithmConfig,
        export_dtype: str | torch.dtype = "float32",
        **kwargs: Any,
    ):
        self._fsdp_setup = setup
        self._policy_config = policy_config
        self._export_dtype = export_dtype
        super().__init__(policy_config, algorithm_config, **kwargs)

    def unsharded_model(self, state: dict[str, torch.Tensor]) -> nn.Module:
        """A plain (CPU) copy of the policy in ``export_dtype``, built from the model path with ``state`` loaded."""
        config = self._policy_config
        model = load_causal_lm(self.model_path, self._export_dtype, "cpu", **config.model_config_kwargs)
        if self.uses_lora:
            model = apply_lora(model, config.model.lora, task_type="CAUSAL_LM")
        model.load_state_dict(state)
        return model

    def export_hf(self, folder: str | Path) -> None:
        """Gather the weights; rank 0 saves a plain transformers model (LoRA merged) plus the tokenizer, and with LoRA
        the adapter in peft's format in ``ADAPTER_DIR`` beside it."""
        state = _full_state_dict(self.model)
        if self._rank == 0:
            if self.uses_lora:
                self.write_adapter(self._trainable_only(state), Path(folder) / ADAPTER_DIR)
            model = self.unsharded_model(state)
            model = model.merge_and_unload() if self.uses_lora else model
            model.save_pretrained(folder)
            self._tokenizer().save_pretrained(folder)
        dist.barrier()


class FSDPCriticWorker(CriticWorker, FSDPTrainable):
    """``CriticWorker`` on one FSDP2 rank."""

    _forward_methods = ("values",)

    def __init__(self, setup: FSDPSetup, critic_config: CriticConfig, algorithm_config: AlgorithmConfig, **kwargs: Any):
        self._fsdp_setup = setup
        super().__init__(critic_config, algorithm_config, **kwargs)


def shard_reference(worker: RefWorker, setup: FSDPSetup) -> RefWorker:
    """Shard a separate frozen reference model (``WorkerBuilder.separate_reference``) as ``setup`` says; its forwards
    then run the same on every rank (``uniform_forwards``)."""
    shard_model(worker.model, setup)
    worker.uniform_forwards = True
    return worker
