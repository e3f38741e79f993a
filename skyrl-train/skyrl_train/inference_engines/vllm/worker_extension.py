"""`WeightSyncWorkerExtension`: mixed into every vLLM worker (``worker_extension_cls``) to receive new weights.

vLLM resolves this class by its qualified name inside its worker processes and adds its methods to the worker, so
`VLLMEngine` can call them on every tensor-parallel rank through ``collective_rpc``. They are the worker's part of
`skyrl_train.weight_sync` (requests and init info arrive in their JSON form):

- `init_weight_update_communicator`: join the weight-update group as rank ``rank_offset + worker rank``
  (`WeightReceiver`; the trainer's sender is rank 0), gloo on CPU, NCCL on GPU;
- `receive_weights`: receive a broadcast chunk (every tensor, in request order) or open a CUDA IPC chunk (GPU only,
  never run here), and load the tensors with the model's own ``load_weights``, which takes checkpoint names and
  does vLLM's fusing (q/k/v into qkv_proj, gate/up into gate_up_proj) and casts to the engine's dtype;
- `destroy_weights_update_group`.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["WeightSyncWorkerExtension"]

logger = logging.getLogger(__name__)


class WeightSyncWorkerExtension:
    """Methods added to vLLM's worker class (``self`` is the worker: ``rank``, ``model_runner``)."""

    _skyrl_receiver = None

    def init_weight_update_communicator(self, info: dict[str, Any]) -> None:
        from skyrl_train.weight_sync import WeightReceiver, WeightSyncInitInfo

        init_info = WeightSyncInitInfo.from_json(info)
        if self._skyrl_receiver is not None:
            if not init_info.override_existing:
                raise RuntimeError("this vLLM worker is already in a weight-update group (override_existing is off)")
            self.destroy_weights_update_group()
        self._skyrl_receiver = WeightReceiver(init_info, local_rank=self.rank)

    def receive_weights(self, request: dict[str, Any]) -> None:
        from skyrl_train.weight_sync import BroadcastWeightUpdateRequest, WeightUpdateRequest

        update = WeightUpdateRequest.from_json(request)
        if isinstance(update, BroadcastWeightUpdateRequest):
            if self._skyrl_receiver is None:
                raise RuntimeError("a broadcast weight update arrived before init_weight_update_communicator")
            # Received into a list first: every tensor must be taken from the group even if loading then fails.
            tensors = list(self._skyrl_receiver.receive(update))
        else:
            from skyrl_train.weight_sync.cuda_ipc import receive_cuda_ipc

            tensors = list(receive_cuda_ipc(update))
        self.model_runner.model.load_weights(weights=tensors)

    def destroy_weights_update_group(self) -> None:
        if self._skyrl_receiver is not None:
            self._skyrl_receiver.close()
        self._skyrl_receiver = None
