"""Weight-update requests: what the trainer tells an engine about the weights it is about to receive.

A request names the tensors (`names`, `dtypes`, `shapes`, in the order they arrive) and the `weight_version` the
engine will generate with once it has applied them. The subclass says how the tensors travel.

Two wire forms:
- JSON (`to_json` / `WeightUpdateRequest.from_json`): plain JSON values only, type-checked when parsed. It is what
  crosses HTTP (`POST /update_weights`). A CUDA IPC request has no JSON form: its handles are pickled objects,
  and nothing that arrives over a network is ever unpickled.
- In-job (`to_rpc` / `WeightUpdateRequest.from_rpc`): the JSON form plus, for a CUDA IPC request, its handles
  pickled as base64 text. Only for calls between the processes of one job (a Ray actor call, vLLM's
  ``collective_rpc`` to its workers over the job's own local sockets), never for anything a network peer sent.
"""

from __future__ import annotations

import base64
import dataclasses
import pickle
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

__all__ = [
    "BroadcastWeightUpdateRequest",
    "CudaIpcWeightUpdateRequest",
    "JSON_REQUEST_TYPES",
    "LoraLoadRequest",
    "NO_JSON_FORM",
    "TensorSpec",
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


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One tensor as a request names it: name, dtype (`dtype_name`) and full shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor) -> TensorSpec:
        """The spec of `tensor` (of an FSDP2 ``DTensor``: its full shape, not the local shard's)."""
        return cls(name, dtype_name(tensor.dtype), tuple(tensor.shape))

    @property
    def nbytes(self) -> int:
        return _numel(self.shape) * torch_dtype(self.dtype).itemsize


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
        return cls.for_specs([TensorSpec.of(name, t) for name, t in tensors.items()], weight_version, **extra)

    @classmethod
    def for_specs(cls, specs: list[TensorSpec], weight_version: int, **extra: Any) -> WeightUpdateRequest:
        """The request describing the tensors of `specs` (in their order)."""
        return cls(
            names=[spec.name for spec in specs],
            dtypes=[spec.dtype for spec in specs],
            shapes=[list(spec.shape) for spec in specs],
            weight_version=weight_version,
            **extra,
        )

    def specs(self) -> list[TensorSpec]:
        """The tensors the request names, in order."""
        return [
            TensorSpec(name, dtype, tuple(shape))
            for name, dtype, shape in zip(self.names, self.dtypes, self.shapes, strict=True)
        ]

    def __len__(self) -> int:
        return len(self.names)

    def numel(self) -> int:
        return sum(_numel(shape) for shape in self.shapes)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (plain JSON values only; see the module docstring)."""
        return {"type": self.type, **dataclasses.asdict(self)}

    def to_rpc(self) -> dict[str, Any]:
        """The in-job form (see the module docstring); the JSON form for every type but CUDA IPC."""
        return self.to_json()

    @staticmethod
    def from_json(data: Any) -> WeightUpdateRequest:
        """The request `to_json` produced (of the subclass its `type` names), with every field's JSON type checked.
        Safe on untrusted input: a `cuda_ipc` request, which has no JSON form, is refused.

        Raises:
            ValueError: not an object, an unknown `type` (or `cuda_ipc`), fields that do not belong to that type, or
                a field of the wrong type.
        """
        cls, data = _request_class(data, JSON_REQUEST_TYPES)
        _check_json_fields(cls, data)
        return cls(**data)

    @staticmethod
    def from_rpc(data: dict[str, Any]) -> WeightUpdateRequest:
        """The request `to_rpc` produced, of any type. It unpickles a CUDA IPC request's handles: only for data
        from a process of this job (see the module docstring), never for anything read from a network peer."""
        cls, data = _request_class(data, _REQUEST_TYPES)
        return cls._from_rpc_fields(data)

    @classmethod
    def _from_rpc_fields(cls, data: dict[str, Any]) -> WeightUpdateRequest:
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
    """GPU only (engines colocated on the policy's GPUs): the tensors are packed, in request order, into one CUDA
    buffer on each policy GPU (`packing.pack`), tensor `i` at byte `offsets[i]`, a multiple of its element size
    (`packing.ALIGNMENT`); `ipc_handles` maps a GPU's UUID to the CUDA IPC handle of that GPU's buffer. It travels
    only between the processes of one job (`to_rpc`, which pickles the handles); it has no JSON form, so it never
    crosses HTTP. An engine worker opens the handle of its own GPU (`cuda_ipc.receive_cuda_ipc`)."""

    type: ClassVar[str] = "cuda_ipc"
    offsets: list[int] = dataclasses.field(default_factory=list)
    ipc_handles: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        super().__post_init__()
        if len(self.offsets) != len(self.names):
            raise ValueError(
                f"a CUDA IPC request needs one offset per name: {len(self.names)} names, {len(self.offsets)} offsets"
            )
        for name, dtype, offset in zip(self.names, self.dtypes, self.offsets, strict=True):
            itemsize = torch_dtype(dtype).itemsize
            if offset < 0 or offset % itemsize:
                raise ValueError(
                    f"{name}: byte offset {offset} in a CUDA IPC buffer is not a non-negative multiple of its "
                    f"{dtype} element size {itemsize}"
                )

    def to_json(self) -> dict[str, Any]:
        raise TypeError(NO_JSON_FORM)

    def to_rpc(self) -> dict[str, Any]:
        data = {"type": self.type, **dataclasses.asdict(self)}
        data["ipc_handles"] = {gpu: _pickled(handle) for gpu, handle in self.ipc_handles.items()}
        return data

    @classmethod
    def _from_rpc_fields(cls, data: dict[str, Any]) -> CudaIpcWeightUpdateRequest:
        data = dict(data, ipc_handles={gpu: _unpickled(text) for gpu, text in data.get("ipc_handles", {}).items()})
        return cls(**data)


NO_JSON_FORM = (
    "a 'cuda_ipc' weight-update request has no JSON form: CUDA IPC handles travel only between the processes of "
    "one job (Ray, vLLM's local RPC), never over HTTP; a remote engine gets the weights by broadcast or as a LoRA "
    "folder"
)


def _pickled(value: Any) -> str:
    return base64.b64encode(pickle.dumps(value)).decode("ascii")


def _unpickled(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


def _request_class(data: Any, types: dict[str, type[WeightUpdateRequest]]):
    """(the class `data["type"]` names among `types`, the other fields); raises ValueError naming what is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"a weight-update request is a JSON object, got {type(data).__name__}")
    data = dict(data)
    kind = data.pop("type", WeightUpdateRequest.type)
    cls = types.get(kind) if isinstance(kind, str) else None
    if cls is None:
        if kind == CudaIpcWeightUpdateRequest.type:
            raise ValueError(NO_JSON_FORM)
        raise ValueError(f"unknown weight-update request type {kind!r}; known: {', '.join(types)}")
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"unknown field(s) {unknown} in a {kind!r} weight-update request")
    return cls, data


def _check_json_fields(cls: type[WeightUpdateRequest], data: dict[str, Any]) -> None:
    """Raise ValueError naming the first field of `data` whose JSON type is not the one `cls` declares."""
    checks = {
        "names": (_is_list_of(str), "a list of strings"),
        "dtypes": (
            lambda v: _is_list_of(str)(v) and all(isinstance(getattr(torch, d, None), torch.dtype) for d in v),
            "a list of torch dtype names (e.g. bfloat16)",
        ),
        "shapes": (
            lambda v: isinstance(v, list) and all(_is_list_of(int)(s) and min(s, default=0) >= 0 for s in v),
            "a list of lists of non-negative integers",
        ),
        "weight_version": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
        "lora_path": (lambda v: isinstance(v, str), "a string"),
    }
    for name, value in data.items():
        check, expected = checks[name]
        if not check(value):
            raise ValueError(f"{name} of a {cls.type!r} weight-update request must be {expected}")


def _is_list_of(kind: type):
    return lambda value: isinstance(value, list) and all(isinstance(v, kind) and not isinstance(v, bool) for v in value)


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


JSON_REQUEST_TYPES: dict[str, type[WeightUpdateRequest]] = {
    cls.type: cls for cls in (WeightUpdateRequest, BroadcastWeightUpdateRequest, LoraLoadRequest)
}
"""The request types with a JSON form: what `from_json` (and so `POST /update_weights`) accepts."""
_REQUEST_TYPES: dict[str, type[WeightUpdateRequest]] = {
    **JSON_REQUEST_TYPES,
    CudaIpcWeightUpdateRequest.type: CudaIpcWeightUpdateRequest,
}
