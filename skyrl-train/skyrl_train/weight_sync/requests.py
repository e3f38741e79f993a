"""Weight-update requests: what the trainer tells an engine about the weights it is about to receive.

A request names the tensors (`names`, `dtypes`, `shapes`, in the order they arrive) and the `weight_version` the
engine will generate with once it has applied them. The subclass says how the tensors travel. Every request has a
JSON form (`to_json` / `WeightUpdateRequest.from_json`), so it crosses HTTP (`POST /update_weights`) and Ray alike.
"""

from __future__ import annotations

import base64
import dataclasses
import pickle
from typing import Any, ClassVar

import torch

__all__ = [
    "BroadcastWeightUpdateRequest",
    "CudaIpcWeightUpdateRequest",
    "LoraLoadRequest",
    "WeightUpdateRequest",
    "dtype_name",
    "torch_dtype",
]


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> "bfloat16" (the form requests carry)."""
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype:
    """The dtype a request names ("bfloat16" -> `torch.bfloat16`); raises ValueError for a name torch does not have."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in a weight-update request")
    return dtype


@dataclasses.dataclass
class WeightUpdateRequest:
    """Base request: tensor metadata plus the version. With no tensors (`names == []`) it only tells the engine
    that its weights are now `weight_version` (an engine that shares the trainer's module, such as the colocated
    `hf` engine, receives nothing else)."""

    type: ClassVar[str] = "version"
    names: list[str] = dataclasses.field(default_factory=list)
    dtypes: list[str] = dataclasses.field(default_factory=list)
    """Each tensor's dtype as it travels (`dtype_name`); the engine casts to its own parameter dtype."""
    shapes: list[list[int]] = dataclasses.field(default_factory=list)
    weight_version: int = 0
    """The trainer's version of these weights: the global step whose update produced them (0 = the weights the
    run started from). Every response the engine generates with them reports it."""

    def __post_init__(self):
        if not len(self.names) == len(self.dtypes) == len(self.shapes):
            raise ValueError(
                f"a weight-update request needs one dtype and one shape per name: {len(self.names)} names, "
                f"{len(self.dtypes)} dtypes, {len(self.shapes)} shapes"
            )
        self.shapes = [list(shape) for shape in self.shapes]

    @classmethod
    def for_tensors(cls, tensors: dict[str, torch.Tensor], weight_version: int, **extra: Any) -> WeightUpdateRequest:
        """The request describing `tensors` (in their order)."""
        return cls(
            names=list(tensors),
            dtypes=[dtype_name(t.dtype) for t in tensors.values()],
            shapes=[list(t.shape) for t in tensors.values()],
            weight_version=weight_version,
            **extra,
        )

    def __len__(self) -> int:
        return len(self.names)

    def numel(self) -> int:
        return sum(_numel(shape) for shape in self.shapes)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, **dataclasses.asdict(self)}

    @staticmethod
    def from_json(data: dict[str, Any]) -> WeightUpdateRequest:
        """The request `to_json` produced (of the subclass its `type` names).

        Raises:
            ValueError: an unknown `type`, or fields that do not belong to that type.
        """
        data = dict(data)
        kind = data.pop("type", WeightUpdateRequest.type)
        cls = _REQUEST_TYPES.get(kind)
        if cls is None:
            raise ValueError(f"unknown weight-update request type {kind!r}; known: {', '.join(_REQUEST_TYPES)}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ValueError(f"unknown field(s) {unknown} in a {kind!r} weight-update request")
        return cls._from_fields(data)

    @classmethod
    def _from_fields(cls, data: dict[str, Any]) -> WeightUpdateRequest:
        return cls(**data)


@dataclasses.dataclass
class BroadcastWeightUpdateRequest(WeightUpdateRequest):
    """The tensors follow through `torch.distributed` broadcasts from rank 0 (the trainer) of the weight-update
    group, one broadcast per tensor, in request order (see `WeightGroup` / `WeightReceiver`)."""

    type: ClassVar[str] = "broadcast"


@dataclasses.dataclass
class LoraLoadRequest(WeightUpdateRequest):
    """Load the LoRA adapter saved in `lora_path` (peft's `adapter_config.json` + `adapter_model.safetensors`)
    on top of the engine's base weights, replacing any adapter loaded before. No tensors travel."""

    type: ClassVar[str] = "lora"
    lora_path: str = ""

    def __post_init__(self):
        super().__post_init__()
        if not self.lora_path:
            raise ValueError("a LoRA load request needs lora_path (the adapter folder)")
        if self.names:
            raise ValueError("a LoRA load request carries no tensors (the adapter is read from lora_path)")


@dataclasses.dataclass
class CudaIpcWeightUpdateRequest(WeightUpdateRequest):
    """GPU only (colocated engines): the tensors are packed, in request order, into one contiguous CUDA buffer per
    trainer GPU; `ipc_handles` maps a GPU's UUID to the CUDA IPC handle of that GPU's buffer (pickled, base64 text
    in JSON: only for trusted callers on the same machine), and `sizes` gives each tensor's size in bytes within the
    buffer."""

    type: ClassVar[str] = "cuda_ipc"
    sizes: list[int] = dataclasses.field(default_factory=list)
    ipc_handles: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        super().__post_init__()
        if len(self.sizes) != len(self.names):
            raise ValueError(f"a CUDA IPC request needs one size per name: {len(self.names)} names, {len(self.sizes)}")

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data["ipc_handles"] = {gpu: _pickled(handle) for gpu, handle in self.ipc_handles.items()}
        return data

    @classmethod
    def _from_fields(cls, data: dict[str, Any]) -> CudaIpcWeightUpdateRequest:
        data = dict(data, ipc_handles={gpu: _unpickled(text) for gpu, text in data.get("ipc_handles", {}).items()})
        return cls(**data)


def _pickled(value: Any) -> str:
    return base64.b64encode(pickle.dumps(value)).decode("ascii")


def _unpickled(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


def _numel(shape: list[int]) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


_REQUEST_TYPES: dict[str, type[WeightUpdateRequest]] = {
    cls.type: cls
    for cls in (WeightUpdateRequest, BroadcastWeightUpdateRequest, LoraLoadRequest, CudaIpcWeightUpdateRequest)
}
