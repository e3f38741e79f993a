"""What the policy and the critic workers share: model set-up, the optimizer, the PPO update loop, checkpoints.

The update loop (``ppo_train``) follows upstream SkyRL: for each epoch, contiguous mini-batches (no shuffle);
per mini-batch, ``forward_backward`` over micro-batches and one ``optim_step``. Unlike upstream v0.4, the loss
normaliser is computed once per mini-batch and the micro-batch losses are *summed* (see
``skyrl_train.algorithms.reductions``), so the gradient does not depend on the micro-batch size and
``optim_step`` does not rescale it.

Checkpoint folder layout (one folder per model, e.g. ``global_step_N/policy/``)::

    model.safetensors   trainable parameters by name (all weights for full fine-tuning; LoRA adapter weights
                        (+ value head) otherwise: the frozen base is rebuilt from the model path)
    optimizer.pt        AdamW state_dict
    extra_state.pt      {"scheduler": LR scheduler state_dict, "rng": torch / cuda / python / numpy RNG states}
    huggingface/        model config and tokenizer
    adapter/            the policy with LoRA only: the adapter in peft's format (``PolicyWorker.save_checkpoint``)

Both ``.pt`` files hold plain data only and load with ``weights_only=True`` (`skyrl_train.utils.plain_data`).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from skyrl_train.models import load_tokenizer
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.types.weight_version import WeightVersion
from skyrl_train.utils.device import autocast_to
from skyrl_train.utils.plain_data import load_plain, save_plain
from skyrl_train.workers.metrics import aggregate_step_metrics, combine_micro_metrics

if TYPE_CHECKING:
    from skyrl_train.config.schema import OptimizerConfig

__all__ = ["MiniBatchInfo", "TrainableWorker", "enable_gradient_checkpointing"]

logger = logging.getLogger(__name__)

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
EXTRA_STATE_FILE = "extra_state.pt"
HF_DIR = "huggingface"


def enable_gradient_checkpointing(model: nn.Module, use_reentrant: bool) -> None:
    """Turn on activation recomputation on a transformers model (call before wrapping it with LoRA).

    Reentrant checkpointing only back-propagates into a segment whose *inputs* require grad; with a frozen
    embedding (LoRA) they do not, so the embedding output is made to require grad.
    """
    kwargs = {"use_reentrant": use_reentrant}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x renamed it
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if use_reentrant:
        model.enable_input_require_grads()


class MiniBatchInfo(NamedTuple):
    """What every micro-batch of a mini-batch divides by, so that its contributions sum to mini-batch values."""

    loss_normalizer: float
    """``Z`` of ``compute_loss_normalizer`` for the mini-batch's loss mask."""
    num_rows: int
    num_tokens: float
    """Loss-masked tokens in the mini-batch (at least 1)."""
    num_sequences: float
    """Rows with at least one loss-masked token in the mini-batch (at least 1)."""


def _rng_state() -> dict[str, Any]:
    """This process's RNG states as plain data (`skyrl_train.utils.plain_data`): numpy's Mersenne Twister key, a numpy
    array, as a list of ints."""
    numpy_state = np.random.get_state(legacy=False)
    numpy_state["state"] = {**numpy_state["state"], "key": numpy_state["state"]["key"].tolist()}
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": numpy_state}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    numpy_state = state["numpy"]
    key = np.array(numpy_state["state"]["key"], dtype=np.uint32)
    np.random.set_state({**numpy_state, "state": {**numpy_state["state"], "key": key}})
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class TrainableWorker:
    """A model with AdamW and an HF LR scheduler, trained by ``ppo_train``; subclasses define the loss.

    Subclasses implement ``_loss_normalizer`` and ``_micro_batch_loss``. Public methods take and return
    ``TrainingInputBatch`` objects and flat metric dicts, so a multi-process strategy can drive them per rank. The
    worker boundary moves devices: batches may arrive on any device (the trainer's are on the CPU) and are moved to
    the model's ``device``; tensors come back on the CPU.
    """

    metric_prefix: ClassVar[str]
    """Prefix of the returned metric names: ``"policy/"`` or ``"critic/"``."""
    lr_metric: ClassVar[str]
    """Name of the learning-rate metric (upstream: ``policy_lr`` / ``critic_lr``)."""

    def __init__(
        self, model: nn.Module, model_path: str, optimizer_config: OptimizerConfig, num_training_steps: int | None
    ):
        self.model = model
        self.model_path = model_path
        self._trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
        if not self._trainable:
            raise ValueError("the model has no trainable parameters")
        self._params = list(self._trainable.values())
        self.weight_version = WeightVersion.of(model)
        """Bumped by every optimizer step and checkpoint load: an engine generating from ``model`` keys its
        prefix cache by it."""
        self._build_optimizer(optimizer_config, num_training_steps)
        self._loaded_tokenizer = None

    @contextmanager
    def separate_optimizer(self, optimizer_config: OptimizerConfig, num_training_steps: int | None) -> Iterator[None]:
        """Inside the block, train with a new AdamW and LR schedule from ``optimizer_config`` (e.g. a warm start's SFT
        steps); afterwards the worker's own optimizer and schedule are back, as they were (no moments, no step taken
        by the block)."""
        kept = self.optimizer, self.scheduler, self.max_grad_norm
        self._build_optimizer(optimizer_config, num_training_steps)
        try:
            yield
        finally:
            self.optimizer, self.scheduler, self.max_grad_norm = kept

    def _build_optimizer(self, optimizer_config: OptimizerConfig, num_training_steps: int | None) -> None:
        """AdamW and the LR scheduler over the trainable parameters; every optimizer step bumps ``weight_version``."""
        from transformers import get_scheduler

        self.optimizer = torch.optim.AdamW(
            self._params,
            lr=optimizer_config.lr,
            betas=tuple(optimizer_config.adam_betas),
            weight_decay=optimizer_config.weight_decay,
        )
        self.scheduler = get_scheduler(
            optimizer_config.scheduler,
            self.optimizer,
            num_warmup_steps=optimizer_config.num_warmup_steps,
            num_training_steps=num_training_steps,
        )
        self.max_grad_norm = optimizer_config.max_grad_norm
        self.weight_version.track_optimizer(self.optimizer)

    # ----------------------------------------------------------------------------------------- subclass hooks

    uniform_forwards: ClassVar[bool] = False
    """Whether every forward must run the same on every rank whatever its rows (FSDP2: forwards are collectives), so
    no prompt prefix is shared and no forward is skipped (`forward.response_logprobs`'s ``uniform``)."""

    autocast_dtype: torch.dtype | None = None
    """Set by subclasses: the forwards (and the loss) run under autocast to this dtype over the fp32 weights, the
    backward and the optimizer in fp32 (`utils.device.Precision`); None: in the weights' dtype."""

    _gradient_scale: int = 1
    """Factor on each micro-batch loss before backward: the data-parallel world size when the gradient reduction
    averages over ranks (FSDP2), so that the result is the sum of the ranks' exact shares."""

    def _gather(self, value: Any) -> list[Any]:
        """``value`` of every data-parallel rank, in rank order. One process: ``[value]``. A data-parallel subclass
        gathers across ranks, so mini-batch normalisers, skips and metrics are those of the global mini-batch."""
        return [value]

    def _loss_normalizer(self, loss_masks: list[torch.Tensor]) -> float:
        """The mini-batch's loss normaliser ``Z`` from its loss masks (one per data-parallel rank)."""
        raise NotImplementedError

    def _micro_batch_loss(
        self, micro_batch: TrainingInputBatch, info: MiniBatchInfo
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The micro-batch's share of the mini-batch loss and its additive metric contributions."""
        raise NotImplementedError

    def _accumulate_other_terms(self, micro_batch_size: int) -> dict[str, float]:
        """Add the gradient of loss terms that are not the mini-batch's to the accumulated one, before each optimizer
        step of ``ppo_train`` (the policy's ptx term); returns their metrics. Default: none."""
        return {}

    def _finalize_step_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Turn the summed micro-batch metrics of one step into reported values (default: unchanged)."""
        return metrics

    def _adds_no_gradient(self, micro_batch: TrainingInputBatch) -> bool:
        """Whether the micro-batch's loss has a zero gradient whatever the weights. Every loss term is reduced under
        the loss mask, so a micro-batch whose loss mask is all zero (groups `zero_variance_filter` dropped,
        infrastructure failures, padding rows) adds nothing."""
        return not bool(micro_batch["loss_mask"].any())

    # ----------------------------------------------------------------------------------------- training

    @property
    def device(self) -> torch.device:
        """Where the model's parameters (this rank's shards with FSDP2) live, and batches are moved to."""
        return next(self.model.parameters()).device

    def _computing(self) -> AbstractContextManager:
        """The context a forward runs in: autocast to ``autocast_dtype`` when set."""
        return autocast_to(self.device, self.autocast_dtype)

    @property
    def lr(self) -> float:
        """The learning rate the next optimizer step will use."""
        return float(self.optimizer.param_groups[0]["lr"])

    def forward_backward(self, mini_batch: TrainingInputBatch, micro_batch_size: int) -> dict[str, float]:
        """Accumulate the gradient of the mini-batch loss, one micro-batch of ``micro_batch_size`` rows at a time.

        Returns the step's metrics (unprefixed): exact mini-batch values whatever the micro-batch size.

        A micro-batch whose loss has a zero gradient (``_adds_no_gradient`` on every data-parallel rank, e.g. GRPO
        groups whose rewards were all equal) runs its forward without autograd, for its metrics, and no backward:
        the same gradient and metrics without the backward's cost. If no micro-batch ran a backward, the gradient is
        set to zero, so that the optimizer step is the one a zero gradient gives (AdamW's moments still move the
        weights).
        """
        self.model.train()
        info = self._mini_batch_info(mini_batch)
        metrics: dict[str, float] = {}
        micro_batches = mini_batch.chunk(micro_batch_size)
        # One gather for the whole mini-batch: the ranks' flags per micro-batch, a backward unless all ranks skip it.
        no_gradient = [self._adds_no_gradient(micro_batch) for micro_batch in micro_batches]
        backward = [not all(flags) for flags in zip(*self._gather(no_gradient), strict=True)]
        for micro_batch, needs_backward in zip(micro_batches, backward, strict=True):
            with torch.set_grad_enabled(needs_backward), self._computing():
                loss, micro_metrics = self._micro_batch_loss(micro_batch, info)
            if needs_backward:
                (loss * self._gradient_scale if self._gradient_scale != 1 else loss).backward()
            combine_micro_metrics(metrics, micro_metrics)
        if not any(backward):
            for param in self._params:
                param.grad = torch.zeros_like(param)
        combined: dict[str, float] = {}
        for rank_metrics in self._gather(metrics):
            combine_micro_metrics(combined, rank_metrics)
        return self._finalize_step_metrics(combined)

    def _mini_batch_info(self, mini_batch: TrainingInputBatch) -> MiniBatchInfo:
        """The normalisers of ``mini_batch`` (of the global mini-batch: every data-parallel rank's part)."""
        masks = self._gather(mini_batch["loss_mask"])
        return MiniBatchInfo(
            loss_normalizer=self._loss_normalizer(masks),
            num_rows=sum(mask.shape[0] for mask in masks),
            num_tokens=max(sum(float(mask.sum()) for mask in masks), 1.0),
            num_sequences=max(sum(float((mask.sum(dim=-1) > 0).sum()) for mask in masks), 1.0),
        )

    def optim_step(self) -> dict[str, float]:
        """Clip the accumulated gradient to ``max_grad_norm``, step optimizer and scheduler, zero the gradient.

        A non-finite gradient norm skips the step (optimizer and scheduler untouched) with a warning.
        Returns ``grad_norm`` (before clipping), the learning rate used (``lr_metric``) and ``skipped_steps``
        (1 if skipped, else 0).
        """
        lr = self.lr
        max_norm = self.max_grad_norm if self.max_grad_norm > 0 else math.inf
        grad_norm = nn.utils.clip_grad_norm_(self._params, max_norm)
        # sharded parameters (FSDP2) give a DTensor norm: the norm of the whole gradient, read with full_tensor()
        grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
        skipped = not math.isfinite(grad_norm)
        if skipped:
            logger.warning("%s gradient norm is %s: skipping this optimizer step", self.metric_prefix, grad_norm)
        else:
            self.optimizer.step()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": grad_norm, self.lr_metric: lr, "skipped_steps": float(skipped)}

    def ppo_train(
        self, batch: TrainingInputBatch, mini_batch_size: int, micro_batch_size: int, update_epochs: int = 1
    ) -> dict[str, float]:
        """One PPO update on ``batch``: ``update_epochs`` passes over contiguous mini-batches of
        ``mini_batch_size`` rows, one optimizer step each.

        A mini-batch whose loss mask is all zero is skipped entirely (no forward, no step: weight decay and the
        scheduler would still move otherwise), with a warning. Returns metrics prefixed with ``metric_prefix``:
        step metrics averaged over steps (min / max for ``_min`` / ``_max`` keys), ``skipped_steps`` (optimizer
        steps skipped for a non-finite gradient) and ``empty_loss_mask_skips`` (mini-batches skipped) as counts.
        """
        batch = batch.to(self.device)
        steps, empty_skips = self._run_update(batch, mini_batch_size, micro_batch_size, update_epochs)
        metrics = aggregate_step_metrics([step for step, _ in steps])
        metrics["skipped_steps"] = float(sum(step["skipped_steps"] for step, _ in steps))
        metrics["empty_loss_mask_skips"] = float(empty_skips)
        metrics.update(self._update_metrics(batch, steps))
        return {self.metric_prefix + key: value for key, value in metrics.items()}

    def _run_update(
        self, batch: TrainingInputBatch, mini_batch_size: int, micro_batch_size: int, update_epochs: int
    ) -> tuple[list[tuple[dict[str, float], bool]], int]:
        """The update loop. Returns, per optimizer step, its metrics and whether it changed the weights (finite
        gradient and a positive learning rate); and the number of mini-batches skipped for an empty loss mask."""
        steps = []
        empty_skips = 0
        for _ in range(update_epochs):
            for mini_batch in batch.chunk(mini_batch_size):
                if not any(self._gather(bool(mini_batch["loss_mask"].any()))):
                    logger.warning(
                        "%s mini-batch of %d rows has an all-zero loss mask: skipping its update",
                        self.metric_prefix,
                        mini_batch.batch_size,
                    )
                    empty_skips += 1
                    continue
                metrics = self.forward_backward(mini_batch, micro_batch_size)
                metrics.update(self._accumulate_other_terms(micro_batch_size))
                step = self.optim_step()
                metrics.update(step)
                steps.append((metrics, not step["skipped_steps"] and step[self.lr_metric] > 0))
        return steps, empty_skips

    def _update_metrics(
        self, batch: TrainingInputBatch, steps: list[tuple[dict[str, float], bool]]
    ) -> dict[str, float]:
        """Extra update-level metrics (unprefixed); none by default."""
        return {}

    # ----------------------------------------------------------------------------------------- checkpoints

    def _tokenizer(self):
        """The model path's tokenizer, loaded on first use (checkpoints and exports carry it)."""
        if self._loaded_tokenizer is None:
            self._loaded_tokenizer = load_tokenizer(self.model_path)
        return self._loaded_tokenizer

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """The trainable weights (LoRA: the adapter; else every weight), detached: what a weight sync sends."""
        return {name: p.detach() for name, p in self._trainable.items()}

    def save_checkpoint(self, folder: str | Path) -> None:
        """Write trainable weights, optimizer, scheduler and RNG states (layout in the module docstring)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file(
            {name: p.detach().contiguous().cpu() for name, p in self._trainable.items()}, str(folder / MODEL_FILE)
        )
        save_plain(self.optimizer.state_dict(), folder / OPTIMIZER_FILE)
        save_plain({"scheduler": self.scheduler.state_dict(), "rng": _rng_state()}, folder / EXTRA_STATE_FILE)
        self.model.config.save_pretrained(folder / HF_DIR)
        self._tokenizer().save_pretrained(folder / HF_DIR)

    def load_checkpoint(self, folder: str | Path) -> None:
        """Restore what ``save_checkpoint`` wrote into this worker (built with the same model and config)."""
        folder = Path(folder)
        weights = load_file(str(folder / MODEL_FILE))
        if set(weights) != set(self._trainable):
            missing = sorted(set(self._trainable) - set(weights))[:5]
            unexpected = sorted(set(weights) - set(self._trainable))[:5]
            raise ValueError(
                f"{folder / MODEL_FILE} does not match this model's trainable parameters "
                f"(missing e.g. {missing}, unexpected e.g. {unexpected}); was it saved with another LoRA setting?"
            )
        self.model.load_state_dict(weights, strict=False)  # every other key is frozen; bumps `weight_version`
        self.optimizer.load_state_dict(load_plain(folder / OPTIMIZER_FILE))
        extra = load_plain(folder / EXTRA_STATE_FILE)
        self.scheduler.load_state_dict(extra["scheduler"])
        _set_rng_state(extra["rng"])
