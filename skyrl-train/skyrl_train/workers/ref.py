"""``RefWorker``: reference-model logprobs (``base_action_log_probs``) for the KL term.

With a LoRA policy the reference is the policy's own module with the adapter switched off (peft's
``disable_adapter``): the frozen base weights *are* the reference, so no second copy is loaded. Without LoRA the
reference is a separate frozen model loaded from ``trainer.ref.model.path``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from skyrl_train.models import load_causal_lm
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.types.weight_version import WeightVersion
from skyrl_train.utils.device import autocast_to
from skyrl_train.workers.forward import batched_response_logprobs
from skyrl_train.workers.lm_head import head_outside_autocast
from skyrl_train.workers.policy import PolicyWorker

if TYPE_CHECKING:
    from skyrl_train.config.schema import RefConfig

__all__ = ["RefWorker"]


class RefWorker:
    """Logprobs of a frozen reference model. Build it with ``for_policy`` (the usual way), ``from_pretrained``
    or ``sharing_policy``."""

    world_size = 1
    """One process (``RefWorkerGroup`` spreads the forward over its data-parallel ranks)."""

    def __init__(
        self,
        model: nn.Module,
        temperature: float = 1.0,
        *,
        disable_adapter: bool = False,
        sample_packing: bool = False,
        uniform_forwards: bool = False,
        autocast_dtype: torch.dtype | None = None,
    ):
        self.model = model
        self.temperature = temperature
        self.disable_adapter = disable_adapter
        self.sample_packing = sample_packing
        """Pack each micro-batch's rows without padding in the forward passes (``trainer.use_sample_packing``)."""
        self.uniform_forwards = uniform_forwards
        """The same forwards on every rank whatever its rows (an FSDP2-sharded model; see ``TrainableWorker``)."""
        self.autocast_dtype = autocast_dtype
        """The forwards run under autocast to it over the weights, as the policy's (``TrainableWorker``)."""

    @classmethod
    def from_pretrained(
        cls,
        model_path: str,
        *,
        temperature: float = 1.0,
        dtype: str | torch.dtype = "float32",
        device: str | torch.device = "cpu",
        model_config_kwargs: dict[str, Any] | None = None,
        sample_packing: bool = False,
        autocast_dtype: torch.dtype | None = None,
    ) -> RefWorker:
        """A separate frozen copy of ``model_path``."""
        model = load_causal_lm(model_path, dtype, device, **dict(model_config_kwargs or {}))
        model.requires_grad_(False)
        if autocast_dtype is not None:
            head_outside_autocast(model)
        return cls(model.eval(), temperature, sample_packing=sample_packing, autocast_dtype=autocast_dtype)

    @classmethod
    def sharing_policy(cls, policy: PolicyWorker) -> RefWorker:
        """The LoRA policy's module with its adapter disabled during reference forward passes."""
        if not policy.uses_lora:
            raise ValueError("sharing_policy needs a LoRA policy; without LoRA the policy's weights change")
        return cls(
            policy.model,
            policy.temperature,
            disable_adapter=True,
            sample_packing=policy.sample_packing,
            uniform_forwards=policy.uniform_forwards,
            autocast_dtype=policy.autocast_dtype,
        )

    @classmethod
    def for_policy(cls, policy: PolicyWorker, ref_config: RefConfig) -> RefWorker:
        """``sharing_policy`` for a LoRA policy, else ``from_pretrained(ref.model.path)`` (the policy's path if
        unset), with the policy's temperature, sample packing, dtype, device and autocast.

        Raises:
            ValueError: LoRA with a ``ref.model.path`` other than the policy's (the disabled-adapter reference is
                the policy's base model, so another reference cannot be honoured).
        """
        ref_path = ref_config.model.path or policy.model_path
        if policy.uses_lora:
            if str(ref_path) != str(policy.model_path):
                raise ValueError(
                    f"with LoRA the reference is the policy's base model {policy.model_path!r}; "
                    f"trainer.ref.model.path={ref_path!r} differs"
                )
            return cls.sharing_policy(policy)
        param = next(policy.model.parameters())
        return cls.from_pretrained(
            ref_path,
            temperature=policy.temperature,
            dtype=param.dtype,
            device=param.device,
            model_config_kwargs=ref_config.model_config_kwargs,
            sample_packing=policy.sample_packing,
            autocast_dtype=policy.autocast_dtype,
        )

    @property
    def device(self) -> torch.device:
        """Where the model's parameters live: batches are moved there, results come back on the CPU."""
        return next(self.model.parameters()).device

    def copy_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Take the weights of ``state`` (a model of the same architecture's ``state_dict``, e.g. the policy after a
        warm start) as the reference's."""
        if self.disable_adapter:
            raise ValueError(
                "a reference sharing the LoRA policy's module has the policy's base weights, none of its own"
            )
        self.model.load_state_dict(state)  # bumps the model's `WeightVersion`

    def compute_logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        """Reference logprobs ``[B, R]`` of the response tokens (no grad; 0 where the batch's ``loss_mask`` is 0), on
        the CPU. With the policy's adapter disabled, the shared module computes with other weights meanwhile, so its
        ``WeightVersion`` changes around the pass."""
        args = (
            self.model,
            batch.to(self.device),
            micro_batch_size,
            self.temperature,
            self.sample_packing,
            self.uniform_forwards,
        )
        with autocast_to(self.device, self.autocast_dtype):
            if not self.disable_adapter:
                return batched_response_logprobs(*args).cpu()
            with self.model.disable_adapter(), WeightVersion.of(self.model).changed():
                return batched_response_logprobs(*args).cpu()
