"""``CriticWorker``: the value model for ``gae`` and its clipped value-loss updates.

The value model is the transformer backbone of ``trainer.critic.model.path`` (no LM head) plus a linear value head
registered under ``trainer.algorithm.value_head_prefix``. The value of response token ``t`` is read at the
position before it (the state in which the token was chosen), mirroring the logprob indexing. The head starts at
zero, so initial values are 0 and the first updates fit the mean return before moving the backbone.

Loss per mini-batch: ``ppo_critic_loss`` (``value_clip``) reduced as a masked-token mean with the mini-batch's
token count, micro-batch losses summed. Metrics of ``ppo_train`` (prefix ``critic/``): ``critic_loss``,
``values_mean``, ``values_clipfrac``, ``critic_lr``, ``grad_norm``, ``skipped_steps``, ``empty_loss_mask_skips``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from skyrl_train.algorithms import compute_loss_normalizer, ppo_critic_loss, reduce_loss
from skyrl_train.models import load_backbone
from skyrl_train.models.lora import apply_lora
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.workers.forward import eval_mode, pad_response, position_ids_from_attention_mask, trim_padding
from skyrl_train.workers.trainable import MiniBatchInfo, TrainableWorker, enable_gradient_checkpointing

if TYPE_CHECKING:
    from skyrl_train.config.schema import AlgorithmConfig, CriticConfig

__all__ = ["CriticWorker", "ValueModel"]


class ValueModel(nn.Module):
    """A transformer backbone with a scalar head: ``values(sequences, attention_mask, R) -> [B, R]``."""

    def __init__(self, backbone: nn.Module, value_head_prefix: str = "value_head"):
        super().__init__()
        self.backbone = backbone
        self.value_head_prefix = value_head_prefix
        head = nn.Linear(backbone.config.hidden_size, 1, dtype=backbone.dtype, device=backbone.device)
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
        self.add_module(value_head_prefix, head)

    @property
    def config(self) -> Any:
        return self.backbone.config

    def values(self, sequences: torch.Tensor, attention_mask: torch.Tensor, response_length: int) -> torch.Tensor:
        """Values ``[B, R]`` of the last ``R`` tokens' states; 0 on response padding."""
        seqs, mask, kept = trim_padding(sequences, attention_mask, response_length)
        if kept == 0:
            return sequences.new_zeros((sequences.shape[0], response_length), dtype=torch.float32)
        hidden = self.backbone(
            input_ids=seqs, attention_mask=mask, position_ids=position_ids_from_attention_mask(mask), use_cache=False
        ).last_hidden_state
        head = getattr(self, self.value_head_prefix)
        with torch.autocast(hidden.device.type, enabled=False):  # the value in the head's dtype, under autocast too
            values = head(hidden[:, -kept - 1 : -1].to(head.weight.dtype)).squeeze(-1).float()
        return pad_response(values * mask[:, -kept:], response_length)


class CriticWorker(TrainableWorker):
    """The critic on one process.

    Args:
        critic_config: ``trainer.critic`` (reads ``model.path``, ``model.lora``, ``optimizer_config``,
            ``model_config_kwargs``).
        algorithm_config: ``trainer.algorithm`` (reads ``value_clip``, ``value_head_prefix``).
        num_training_steps, gradient_checkpointing, gradient_checkpointing_use_reentrant, dtype, device,
            autocast_dtype: as for ``PolicyWorker``.
    """

    metric_prefix = "critic/"
    lr_metric = "critic_lr"

    def __init__(
        self,
        critic_config: CriticConfig,
        algorithm_config: AlgorithmConfig,
        *,
        num_training_steps: int | None = None,
        gradient_checkpointing: bool = False,
        gradient_checkpointing_use_reentrant: bool = False,
        dtype: str | torch.dtype = "float32",
        device: str | torch.device = "cpu",
        autocast_dtype: torch.dtype | None = None,
    ):
        model_path = critic_config.model.path
        if not model_path:
            raise ValueError("trainer.critic.model.path is not set")
        backbone = load_backbone(model_path, dtype, device, **critic_config.model_config_kwargs)
        if gradient_checkpointing:
            enable_gradient_checkpointing(backbone, gradient_checkpointing_use_reentrant)
        if critic_config.model.lora.rank > 0:
            backbone = apply_lora(backbone, critic_config.model.lora, task_type=None)
        model = ValueModel(backbone, algorithm_config.value_head_prefix)
        super().__init__(model, model_path, critic_config.optimizer_config, num_training_steps)
        self.value_clip = algorithm_config.value_clip
        self.autocast_dtype = autocast_dtype

    @torch.no_grad()
    def compute_values(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        """Values ``[B, R]`` of the response tokens (no grad, eval mode), on the CPU: the batch's ``values``."""
        response_length = batch["response_mask"].shape[1]
        with eval_mode(self.model), self._computing():
            chunks = [
                self.model.values(micro["sequences"], micro["attention_mask"], response_length)
                for micro in batch.to(self.device).chunk(micro_batch_size)
            ]
        return torch.cat(chunks).cpu()

    def _loss_normalizer(self, loss_masks: list[torch.Tensor]) -> float:
        return compute_loss_normalizer(loss_masks, "token_mean")

    def _micro_batch_loss(
        self, micro_batch: TrainingInputBatch, info: MiniBatchInfo
    ) -> tuple[torch.Tensor, dict[str, float]]:
        loss_mask = micro_batch["loss_mask"]
        values = self.model.values(micro_batch["sequences"], micro_batch["attention_mask"], loss_mask.shape[1])
        per_token, stats = ppo_critic_loss(
            values, micro_batch["values"], micro_batch["returns"], loss_mask, self.value_clip
        )
        loss = reduce_loss(per_token, loss_mask, "token_mean", normalizer=info.loss_normalizer)
        weight = float(loss_mask.sum()) / info.num_tokens
        metrics = {"critic_loss": loss.item(), **{key: value * weight for key, value in stats.items()}}
        return loss, metrics
