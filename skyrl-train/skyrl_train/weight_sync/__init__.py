"""Weight sync from the trainer to inference engines (upstream SkyRL's `weight_sync/` names and semantics).

The contract, for anyone implementing an engine's receiving side:

1. Engine methods (`InferenceEngineInterface`):
   - `init_weight_update_communicator(info: WeightSyncInitInfo)`: join the weight-update group. The engine's
     workers take ranks `info.rank_offset + local_rank` (local ranks 0 .. tp*pp*dp - 1) with
     `WeightReceiver(info, local_rank)`; the call returns once the whole group has formed (the trainer is rank 0 and
     joins at the same time). Already in a group: leave it first if `info.override_existing`, else refuse.
   - `update_named_weights(request: WeightUpdateRequest)`: apply the request (below), then generate with
     `request.weight_version` and report it on every response generated with these weights
     (`InferenceEngineOutput.weight_versions`). Cached prefixes computed with the old weights must not be reused.
   - `destroy_weights_update_group()`: leave the group.
   - `weight_sync_ranks()`: how many ranks the engine takes in the group (tp * pp * dp by default).
2. Requests (`skyrl_train.types.weight_sync_requests`; `type` tells them apart): the JSON form (`to_json()` /
   `WeightUpdateRequest.from_json(data)`, type-checked, what crosses HTTP) exists for every type but `cuda_ipc`;
   the in-job form (`to_rpc()` / `from_rpc(data)`) of every type, for calls between the processes of one job:
   - `WeightUpdateRequest` (`type="version"`, no tensors): the weights are already in place (an engine sharing the
     trainer's module); only take the version;
   - `BroadcastWeightUpdateRequest` (`broadcast`): the tensors named by `names` / `dtypes` / `shapes` follow, one
     `torch.distributed` broadcast from rank 0 per tensor, in request order: receive them all
     (`WeightReceiver.receive`), even if the update is then refused, then load them (cast to the engine's dtype;
     `copy_into_module` for a torch module). A sync of many weights arrives as several requests (chunks);
   - `LoraLoadRequest` (`lora`): load the peft adapter folder `lora_path` (`adapter_config.json` +
     `adapter_model.safetensors`) on the base weights, replacing the previous adapter;
   - `CudaIpcWeightUpdateRequest` (`cuda_ipc`, GPU only, in-job form only): map `ipc_handles[<this GPU's UUID>]`
     (one handle per policy GPU; none for this GPU is an error naming the UUIDs) and cut the buffer into tensors at
     `offsets` (`cuda_ipc.receive_cuda_ipc`, `packing.unpack`); copy them out and synchronize before answering,
     since the sender frees the buffer once every engine has answered. A sync of many weights arrives as several
     requests.
3. `WeightSyncInitInfo` (`skyrl_train.types.weight_sync_init_info`): `master_addr`, `master_port`, `world_size`
   (1 + all engine ranks), `rank_offset`, `group_name`, `backend` (gloo | nccl), `override_existing`, `timeout_s`;
   JSON round trip; `for_engine(i, ranks_per_engine)` gives engine `i` its rank offset `1 + i * ranks_per_engine`.
4. Over HTTP (`python -m skyrl_train.serve`, and what `RemoteInferenceEngine` calls): `POST
   /init_weight_update_communicator` (body: the info's JSON), `POST /update_weights` (body: the request's JSON;
   never `cuda_ipc`), `POST /destroy_weights_update_group`; each answers once done. They exist only on a server
   started with `--enable-control` and need its control token (`skyrl_train.serve.access`).

The trainer side is `WeightSyncSender` (`sender.py`); `transfer_mode(cfg, ...)` picks its mode: CUDA IPC only with
`weight_sync_backend=nccl` and engines colocated on the policy's GPUs (each policy rank packs on its own GPU for the
engine there, `cuda_ipc.py`), LoRA adapters through `lora_sync_path`, else broadcast (engines on other GPUs or
nodes: nccl with CUDA tensors, or gloo with CPU tensors, `group.group_device`). The weight version is the trainer's global step whose update produced the weights (0 = the weights the
run started from).
"""

from skyrl_train.types.weight_sync_init_info import WeightSyncInitInfo
from skyrl_train.types.weight_sync_requests import (
    BroadcastWeightUpdateRequest,
    CudaIpcWeightUpdateRequest,
    LoraLoadRequest,
    TensorSpec,
    WeightUpdateRequest,
)
from skyrl_train.weight_sync.group import WeightGroup
from skyrl_train.weight_sync.receiver import WeightReceiver, copy_into_module
from skyrl_train.weight_sync.sender import WeightSource, WeightSyncSender
from skyrl_train.weight_sync.strategy import override_existing_update_group, transfer_mode

__all__ = [
    "BroadcastWeightUpdateRequest",
    "CudaIpcWeightUpdateRequest",
    "LoraLoadRequest",
    "TensorSpec",
    "WeightGroup",
    "WeightReceiver",
    "WeightSource",
    "WeightSyncInitInfo",
    "WeightSyncSender",
    "WeightUpdateRequest",
    "copy_into_module",
    "override_existing_update_group",
    "transfer_mode",
]
