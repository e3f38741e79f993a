"""The policy's weights in the driver, for the ``hf`` inference engine, kept equal to the FSDP2 ranks' weights.

With ``trainer.strategy=single`` the engine generates from the policy's own module. With ``fsdp2`` the trained
weights live sharded in the actors, so the driver keeps a plain copy of the policy (same model path, same LoRA
setup) for the engine. ``sync()`` gathers the trainable weights (the LoRA adapter, or every weight) from the ranks
and loads them into the copy (``load_state_dict``, which also bumps the model's ``WeightVersion`` for the engine's
prefix cache). It runs once at construction, after every policy update (the weight sync's ``refresh``) and
after every checkpoint load.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from skyrl_train.models import load_causal_lm
from skyrl_train.models.lora import apply_lora

if TYPE_CHECKING:
    from skyrl_train.config.schema import PolicyConfig
    from skyrl_train.distributed.worker_groups import PolicyWorkerGroup

__all__ = ["DriverPolicyCopy"]

logger = logging.getLogger(__name__)


class DriverPolicyCopy:
    """``model``: an unsharded copy of the policy in this process (on ``device``, in ``dtype``), synced from
    ``policy`` (a worker group)."""

    def __init__(
        self,
        policy_config: PolicyConfig,
        policy: PolicyWorkerGroup,
        dtype: str | torch.dtype = "float32",
        device: str | torch.device = "cpu",
    ):
        model = load_causal_lm(policy_config.model.path, dtype, device, **policy_config.model_config_kwargs)
        if policy_config.model.lora.rank > 0:
            model = apply_lora(model, policy_config.model.lora, task_type="CAUSAL_LM")
        self.model = model.eval()
        self.policy = policy
        self.sync()
        policy.after_load.append(self.sync)

    def sync(self) -> None:
        """Load the ranks' current trainable weights into ``model``.

        Raises:
            RuntimeError: the gathered weights name parameters this copy does not have (a different model or LoRA
                setup), which would otherwise leave the engine on stale weights.
        """
        state = self.policy.trainable_state_dict()
        result = self.model.load_state_dict(state, strict=False)
        if result.unexpected_keys:
            raise RuntimeError(
                f"the policy ranks sent weights the driver's copy does not have: {result.unexpected_keys[:5]}"
            )
        logger.info("synced %d policy tensors to the driver's inference copy", len(state))
