"""Keep vLLM engines on the policy's current weights: `VLLMWeightSync`, called after every policy update.

The trainer process (the driver) holds or gathers the policy's trainable weights (``policy.trainable_state_dict()``:
the single-process worker's own tensors, or the FSDP2 ranks' gathered ones) and sends them:

- LoRA: the adapter is written as a peft adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``) to
  ``trainer.policy.model.lora.lora_sync_path`` and every engine loads it in place (vLLM LoRA request, one slot);
- full weights: broadcast from the driver (rank 0 of a weight-update group with every engine worker, gloo on CPU,
  NCCL on GPU per ``generator.weight_sync_backend``), cast to ``generator.model_dtype``, one tensor at a time in
  one request per sync; each worker loads them with vLLM's own ``load_weights``.

Prefix caches are dropped after every sync (their KV belongs to the old weights).
"""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

import torch

__all__ = ["VLLMWeightSync", "lora_target_modules", "save_lora_adapter"]

logger = logging.getLogger(__name__)

GROUP_NAME = "skyrl"


def lora_target_modules(state: dict[str, Any]) -> list[str]:
    """The module names (last component) that carry a LoRA adapter in a peft state dict."""
    names = {key.split(".lora_")[0].rsplit(".", 1)[-1] for key in state if ".lora_A." in key}
    if not names:
        raise ValueError("the state dict has no LoRA A matrices (keys with '.lora_A.')")
    return sorted(names)


def save_lora_adapter(state: dict[str, torch.Tensor], lora: Any, base_model: str, folder: str | Path) -> Path:
    """Write the LoRA tensors of a peft model's state dict (adapter "default") as a peft adapter folder that vLLM
    loads: ``adapter_model.safetensors`` (keys without the adapter name) and ``adapter_config.json`` (rank, alpha,
    the adapted module names). ``lora`` is a `LoraConfig` section. Returns the folder."""
    from safetensors.torch import save_file

    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {
        key.replace(".default.", "."): value.detach().contiguous().cpu()
        for key, value in state.items()
        if ".lora_A." in key or ".lora_B." in key
    }
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": int(lora.rank),
        "lora_alpha": int(lora.alpha),
        "lora_dropout": float(lora.dropout),
        "target_modules": lora_target_modules(state),
        "bias": "none",
        "modules_to_save": None,
    }
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return folder


class VLLMWeightSync:
    """`sync()` sends `policy`'s trainable weights to every engine of `engines` (a `VLLMEngineGroup`).

    Args:
        policy: anything with ``trainable_state_dict()`` (the full trainable weights in this process).
        lora: the policy's ``model.lora`` section (rank 0 = full weights).
        base_model: the engines' model path (written into the adapter config).
        model_dtype: the engines' weight dtype; full weights are cast to it before sending.
        backend: ``generator.weight_sync_backend``: "gloo" or "nccl" (NCCL needs a CUDA device here).
    """

    def __init__(self, engines: Any, policy: Any, *, lora: Any, base_model: str, model_dtype: str, backend: str):
        self.engines = engines
        self.policy = policy
        self.lora = lora
        self.base_model = base_model
        self.dtype = getattr(torch, model_dtype)
        self.backend = backend
        self._group = None

    @property
    def uses_lora(self) -> bool:
        return int(self.lora.rank) > 0

    def sync(self) -> None:
        """Blocking: returns when every engine generates with the new weights."""
        import ray

        state = self.policy.trainable_state_dict()
        if self.uses_lora:
            folder = save_lora_adapter(state, self.lora, self.base_model, self.lora.lora_sync_path)
            ray.get([actor.load_lora_adapter.remote(str(folder)) for actor in self.engines.actors])
        else:
            self._broadcast(state)
            ray.get([actor.reset_prefix_cache.remote() for actor in self.engines.actors])
        logger.info("synced %d policy tensors to %d vLLM engine(s)", len(state), self.engines.num_engines)

    __call__ = sync

    def _broadcast(self, state: dict[str, torch.Tensor]) -> None:
        import ray

        group = self._join()
        names = list(state)
        dtypes = [str(self.dtype).removeprefix("torch.")] * len(names)
        shapes = [list(state[name].shape) for name in names]
        pending = [
            actor.collective_rpc.remote("receive_broadcast_weights", names, dtypes, shapes)
            for actor in self.engines.actors
        ]
        for name in names:
            group.broadcast(state[name].detach().to(device=group.device, dtype=self.dtype).contiguous(), src=0)
        ray.get(pending)

    def _join(self):
        """The weight-update group (made on first use): this process is rank 0, engine i's worker w is rank
        ``1 + i * TP + w``."""
        if self._group is not None:
            return self._group
        import ray

        from skyrl_train.distributed.stateless_group import StatelessGroup

        host = ray.util.get_node_ip_address()
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        tp = self.engines.tp_size()
        world = 1 + self.engines.num_engines * tp
        pending = [
            actor.collective_rpc.remote(
                "init_weight_update_communicator", host, port, 1 + i * tp, world, GROUP_NAME, self.backend
            )
            for i, actor in enumerate(self.engines.actors)
        ]
        self._group = StatelessGroup(host, port, 0, world, GROUP_NAME, self.backend)
        ray.get(pending)
        logger.info("weight-update group %r ready: %d ranks over %s", GROUP_NAME, world, self.backend)
        return self._group

    def close(self) -> None:
        """Leave the weight-update group (the engines first)."""
        import ray

        if self._group is None:
            return
        ray.get([actor.collective_rpc.remote("destroy_weights_update_group") for actor in self.engines.actors])
        self._group.close()
        self._group = None
