"""Trainer side of a weight sync: `WeightSyncSender` takes the policy's trainable weights to the engines.

Modes (`SyncMode`, chosen by `transfer_mode`):
- `shared`: the engine generates from the trainer's own module (the colocated `hf` engine), or from a copy the
  trainer refreshes itself (`refresh`, e.g. `DriverPolicyCopy.sync` with fsdp2); only the version is sent;
- `lora`: the adapter is saved under `lora_sync_path` and the engines load it (`LoraLoadRequest`);
- `broadcast`: every trainable weight is broadcast from the trainer (rank 0 of the weight-update group) in chunks
  of at most `chunk_bytes`, each announced by a `BroadcastWeightUpdateRequest` sent to the engines first;
- `cuda_ipc`: GPU only, with engines colocated on the policy's GPUs: every policy rank packs chunks of at most
  `chunk_bytes` on its own GPU and the engines open the buffer of theirs (`cuda_ipc.py`).

The weights come from `source.trainable_state_dict()` (a single-process `PolicyWorker`, or an fsdp2
`PolicyWorkerGroup`, which gathers them from its ranks to this process), except with CUDA IPC: a source that packs
on its own GPUs (`cuda_ipc.CudaIpcSource`, the fsdp2 `PolicyWorkerGroup`) does so; a policy in this process is
packed from its module (`cuda_ipc.ModuleIpcSource`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Literal, Protocol

import torch

from skyrl_train.types.weight_sync_init_info import WeightSyncInitInfo
from skyrl_train.types.weight_sync_requests import BroadcastWeightUpdateRequest, LoraLoadRequest, WeightUpdateRequest
from skyrl_train.weight_sync.cuda_ipc import CudaIpcSource, ModuleIpcSource, send_cuda_ipc
from skyrl_train.weight_sync.group import WeightGroup
from skyrl_train.weight_sync.lora import adapter_folder, remove_older_adapters, save_adapter
from skyrl_train.weight_sync.packing import split_by_bytes

if TYPE_CHECKING:
    from skyrl_train.config.schema import LoraConfig

__all__ = ["DEFAULT_CHUNK_BYTES", "SyncMode", "WeightSource", "WeightSyncEngines", "WeightSyncSender"]

logger = logging.getLogger(__name__)

SyncMode = Literal["shared", "lora", "broadcast", "cuda_ipc"]
DEFAULT_CHUNK_BYTES = 256 * 2**20


class WeightSource(Protocol):
    """The policy as a weight sync sees it (`PolicyWorker` and fsdp2's `PolicyWorkerGroup` both are one)."""

    uses_lora: bool

    def trainable_state_dict(self) -> dict[str, torch.Tensor]: ...


class WeightSyncEngines(Protocol):
    """The engines' side of the contract (`InferenceEngineInterface` methods; a multi-engine client fans out)."""

    def weight_sync_ranks(self) -> int: ...

    async def init_weight_update_communicator(self, info: WeightSyncInitInfo) -> None: ...

    async def update_named_weights(self, request: WeightUpdateRequest) -> None: ...

    async def destroy_weights_update_group(self) -> None: ...

    async def reset_prefix_cache(self) -> None: ...


class WeightSyncSender:
    """Sends the policy's weights to `engines` as version `weight_version` (`await sync(version)`).

    Args:
        engines: the engines (one, or a client over many).
        source: the policy (see `WeightSource`).
        mode: see the module docstring.
        backend: the weight-update group's backend (`broadcast`): gloo (CPU) or nccl (GPU).
        master_addr: the address engines reach this process at (the group's TCP store).
        lora_config, base_model_path, lora_sync_path: the adapter's config, base model and folder (`lora`).
        override_existing: engines already in a weight-update group leave it for the new one.
        chunk_bytes: most bytes announced by one broadcast request, or packed into one CUDA IPC buffer per GPU.
        refresh: `shared` mode: called before the version is sent (it brings the engine's copy up to date).
        timeout_s: how long group members wait for each other.
    """

    def __init__(
        self,
        engines: WeightSyncEngines,
        source: WeightSource,
        mode: SyncMode,
        *,
        backend: Literal["gloo", "nccl"] = "gloo",
        master_addr: str = "127.0.0.1",
        lora_config: LoraConfig | None = None,
        base_model_path: str | None = None,
        lora_sync_path: str | None = None,
        override_existing: bool = False,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        refresh: Callable[[], None] | None = None,
        timeout_s: float = 600.0,
    ):
        if mode == "lora" and (lora_config is None or not base_model_path or not lora_sync_path):
            raise ValueError("LoRA weight sync needs lora_config, base_model_path and lora_sync_path")
        self.engines = engines
        self.source = source
        self.mode = mode
        self.backend = backend
        self.master_addr = master_addr
        self.lora_config = lora_config
        self.base_model_path = base_model_path
        self.lora_sync_path = lora_sync_path
        self.override_existing = override_existing
        self.chunk_bytes = chunk_bytes
        self.refresh = refresh
        self.timeout_s = timeout_s
        self.group: WeightGroup | None = None
        self.last_version: int | None = None

    async def sync(self, weight_version: int) -> None:
        """Bring every engine to the policy's current weights, which become `weight_version`."""
        if self.mode == "shared":
            if self.refresh is not None:
                await asyncio.to_thread(self.refresh)
            await self.engines.update_named_weights(WeightUpdateRequest(weight_version=weight_version))
        elif self.mode == "lora":
            await self._send_adapter(weight_version)
        elif self.mode == "broadcast":
            await self._broadcast_with_rejoin(weight_version)
        else:
            await send_cuda_ipc(self.engines, self._ipc_source(), weight_version, self.chunk_bytes)
        self.last_version = weight_version
        logger.info("engines now generate with weight version %d (%s sync)", weight_version, self.mode)

    async def close(self) -> None:
        """Leave the weight-update group (the engines leave too)."""
        if self.group is not None:
            await self.engines.destroy_weights_update_group()
            self.group.destroy()
            self.group = None

    # -- lora -----------------------------------------------------------------------------------------------------

    async def _send_adapter(self, weight_version: int) -> None:
        state = await asyncio.to_thread(self._state)
        folder = adapter_folder(self.lora_sync_path, weight_version)
        await asyncio.to_thread(save_adapter, state, folder, self.lora_config, self.base_model_path)
        await self.engines.update_named_weights(LoraLoadRequest(weight_version=weight_version, lora_path=str(folder)))
        remove_older_adapters(self.lora_sync_path, keep=folder)

    # -- broadcast ------------------------------------------------------------------------------------------------

    async def _broadcast_with_rejoin(self, weight_version: int) -> None:
        """Broadcast; if an engine drops out on the way (the client stops counting it), rebuild the group over
        the engines left and send again, once."""
        ranks = self.engines.weight_sync_ranks()
        try:
            await self._broadcast(weight_version)
        except Exception:
            if self.engines.weight_sync_ranks() == ranks:  # raises itself when no engine is left
                raise
            logger.warning("an engine failed during the weight sync; rebuilding the weight-update group without it")
            self._drop_group()
            await self._broadcast(weight_version)

    async def _broadcast(self, weight_version: int) -> None:
        await self._ensure_group()
        state = await asyncio.to_thread(self._state)
        for chunk in chunked(state, self.chunk_bytes):
            request = BroadcastWeightUpdateRequest.for_tensors(chunk, weight_version)
            announced = asyncio.ensure_future(self.engines.update_named_weights(request))
            try:
                await asyncio.to_thread(self._broadcast_chunk, chunk)
            except BaseException as error:
                if announced.done() and not announced.cancelled() and announced.exception() is not None:
                    # An engine refused the chunk without receiving it (it does not fit its model), so the broadcast
                    # ran into the group's timeout: the engine's reason is the one to report.
                    raise announced.exception() from error
                announced.cancel()
                raise
            await announced
        await self.engines.reset_prefix_cache()

    def _broadcast_chunk(self, chunk: dict[str, torch.Tensor]) -> None:
        for tensor in chunk.values():
            self.group.broadcast(tensor.to(self.group.device).contiguous())

    async def _ensure_group(self) -> None:
        """Form the weight-update group, or form it again if the number of engine ranks changed (an engine died)."""
        ranks = self.engines.weight_sync_ranks()
        if self.group is not None and self.group.info.world_size == 1 + ranks:
            return
        if self.group is not None:
            self._drop_group()
        store = WeightGroup.host_store(self.master_addr, 1 + ranks, self.timeout_s)
        info = WeightSyncInitInfo.for_engines(
            self.master_addr,
            store.port,
            ranks,
            backend=self.backend,
            override_existing=self.override_existing,
            timeout_s=self.timeout_s,
        )
        joined = asyncio.ensure_future(self.engines.init_weight_update_communicator(info))
        try:
            self.group = await asyncio.to_thread(WeightGroup, info, 0, store)
        except BaseException:
            joined.cancel()
            raise
        await joined

    def _drop_group(self) -> None:
        """Forget a broken group; engines still in it are told to leave it by the next `init` (override)."""
        self.group.destroy()
        self.group = None
        self.override_existing = True

    def _ipc_source(self) -> CudaIpcSource:
        """The policy's own GPU packers (fsdp2 ranks), or its module when it lives in this process."""
        if isinstance(self.source, CudaIpcSource):
            return self.source
        model = getattr(self.source, "model", None)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"CUDA IPC weight sync needs a policy that packs on its own GPUs (fsdp2) or a module in this process; "
                f"{type(self.source).__name__} has neither"
            )
        return ModuleIpcSource(model)

    def _state(self) -> dict[str, torch.Tensor]:
        state = self.source.trainable_state_dict()
        if not state:
            raise RuntimeError("the policy returned no trainable weights to sync")
        return state


def chunked(state: dict[str, torch.Tensor], chunk_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
    """`state` in order, cut into chunks of at most `chunk_bytes` (a larger tensor is a chunk of its own)."""
    for items in split_by_bytes(state.items(), lambda item: item[1].numel() * item[1].element_size(), chunk_bytes):
        yield dict(items)
