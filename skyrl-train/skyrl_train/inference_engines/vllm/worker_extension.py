"""`WeightSyncWorkerExtension`: mixed into every vLLM worker (``worker_extension_cls``) to receive new weights.

vLLM resolves this class by its qualified name inside its worker processes and adds its methods to the worker, so
`VLLMEngine` can call them on every tensor-parallel rank through ``collective_rpc``. They are the worker's part of
`skyrl_train.weight_sync` (init info arrives in its JSON form, requests in their in-job form, `to_rpc`, over the
job's own local sockets):

- `init_weight_update_communicator`: join the weight-update group as rank ``rank_offset + worker rank``
  (`WeightReceiver`; the trainer's sender is rank 0), gloo on CPU, NCCL on GPU;
- `receive_weights`: receive a broadcast chunk (every tensor, in request order) or open a CUDA IPC chunk, and load
  the tensors with the model's own ``load_weights``, which takes checkpoint names and does vLLM's fusing (q/k/v
  into qkv_proj, gate/up into gate_up_proj) and casts to the engine's dtype. CUDA IPC (GPU only, never run here):
  the worker opens the buffer the policy rank on its own GPU packed (`cuda_ipc.receive_cuda_ipc`, which raises,
  naming the GPU UUIDs, when the request has no handle for this worker's GPU) and synchronizes after loading, so
  the copies out of the buffer are done before the policy rank frees it;
- `finalize_weight_reload`: after the last chunk of a sync, before the next generation (tied modules, e.g. a tied
  ``lm_head``, are processed again: the reload processes a tied parameter with its first module only);
- `destroy_weights_update_group`.

Loading goes through vLLM's layerwise reload (``initialize_layerwise_reload`` before the first chunk of a sync,
``finalize_layerwise_reload`` in `finalize_weight_reload`): after loading, vLLM processes weights into its
kernels' format (on CPU, e.g., repacked linear weights that no longer carry a ``weight_loader``), so a plain
second ``load_weights`` fails; the reload restores the checkpoint-format parameters, loads a layer once all its
tensors have arrived (chunks may split a layer) and processes it again.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["WeightSyncWorkerExtension"]

logger = logging.getLogger(__name__)


class WeightSyncWorkerExtension:
    """Methods added to vLLM's worker class (``self`` is the worker: ``rank``, ``model_runner``)."""

    _skyrl_receiver = None
    _skyrl_reloading = False

    def init_weight_update_communicator(self, info: dict[str, Any]) -> None:
        from skyrl_train.weight_sync import WeightReceiver, WeightSyncInitInfo

        init_info = WeightSyncInitInfo.from_json(info)
        if self._skyrl_receiver is not None:
            if not init_info.override_existing:
                raise RuntimeError("this vLLM worker is already in a weight-update group (override_existing is off)")
            self.destroy_weights_update_group()
        self._skyrl_receiver = WeightReceiver(init_info, local_rank=self.rank)

    def receive_weights(self, request: dict[str, Any]) -> None:
        from skyrl_train.weight_sync import (
            BroadcastWeightUpdateRequest,
            CudaIpcWeightUpdateRequest,
            WeightUpdateRequest,
        )

        update = WeightUpdateRequest.from_rpc(request)
        if isinstance(update, BroadcastWeightUpdateRequest):
            if self._skyrl_receiver is None:
                raise RuntimeError("a broadcast weight update arrived before init_weight_update_communicator")
            # Received into a list first: every tensor must be taken from the group even if loading then fails.
            tensors = list(self._skyrl_receiver.receive(update))
        elif isinstance(update, CudaIpcWeightUpdateRequest):  # GPU only
            from skyrl_train.weight_sync.cuda_ipc import receive_cuda_ipc

            tensors = list(receive_cuda_ipc(update))
        else:
            raise ValueError(f"a {update.type!r} weight update carries no tensors for the vLLM workers")
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        model = self.model_runner.get_model()
        with set_current_vllm_config(self.vllm_config):
            if not self._skyrl_reloading:
                initialize_layerwise_reload(model)
                self._skyrl_reloading = True
            model.load_weights(weights=tensors)
        if isinstance(update, CudaIpcWeightUpdateRequest):  # GPU only
            import torch

            torch.cuda.synchronize()

    def finalize_weight_reload(self) -> None:
        """Process the layers loaded since the sync began into the kernels' format (a no-op with none pending)."""
        if not self._skyrl_reloading:
            return
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        model = self.model_runner.get_model()
        with set_current_vllm_config(self.vllm_config):
            finalize_layerwise_reload(model, self.vllm_config.model_config)
            _process_tied_modules_again(model)
        self._skyrl_reloading = False

    def destroy_weights_update_group(self) -> None:
        if self._skyrl_receiver is not None:
            self._skyrl_receiver.close()
        self._skyrl_receiver = None


def _process_tied_modules_again(model) -> None:
    """Process again every module that holds a parameter of a module before it (tied weights: a tied ``lm_head``).

    The reload processes a tied parameter with its first module only (a limitation vLLM documents) and puts the later
    module's tensors back untouched; on CPU that module keeps the packed GEMM weights it made from the old values, so
    a tied ``lm_head`` would go on scoring tokens with the old embeddings.
    """
    seen: set[int] = set()
    for module in model.modules():
        params = [id(param) for param in module.parameters(recurse=False)]
        quant_method = getattr(module, "quant_method", None)
        if quant_method is not None and any(param in seen for param in params):
            quant_method.process_weights_after_loading(module)
        seen.update(params)
