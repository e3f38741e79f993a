"""Engine side of a weight sync: `WeightReceiver` (join the group, receive a request's tensors),
`check_specs_fit` (a request's names, shapes and dtypes against a module, before anything is allocated) and
`copy_into_module` (write received tensors into a torch module's parameters by name)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import nn

from skyrl_train.types.weight_sync_init_info import WeightSyncInitInfo
from skyrl_train.types.weight_sync_requests import BroadcastWeightUpdateRequest, TensorSpec, torch_dtype
from skyrl_train.weight_sync.group import WeightGroup

__all__ = ["WeightReceiver", "check_specs_fit", "copy_into_module"]


class WeightReceiver:
    """One engine worker's membership of the weight-update group: rank `info.rank_offset + local_rank` (the
    engine's workers number their `local_rank` from 0). Joining blocks until the whole group has joined."""

    def __init__(self, info: WeightSyncInitInfo, local_rank: int = 0):
        self.info = info
        self.group = WeightGroup(info, info.rank_offset + local_rank)

    def receive(self, request: BroadcastWeightUpdateRequest) -> Iterator[tuple[str, torch.Tensor]]:
        """The request's tensors as `(name, tensor)`, in request order, each received as the trainer broadcasts
        it. Consume the whole iterator even if the update is to be refused: every member must take part in every
        broadcast, or the trainer waits until the group's timeout."""
        if not isinstance(request, BroadcastWeightUpdateRequest):
            raise TypeError(f"a WeightReceiver receives broadcast requests, got a {request.type!r} request")
        for name, dtype, shape in zip(request.names, request.dtypes, request.shapes, strict=True):
            tensor = torch.empty(shape, dtype=torch_dtype(dtype), device=self.group.device)
            yield name, self.group.broadcast(tensor)

    def close(self) -> None:
        self.group.destroy()


def copy_into_module(model: nn.Module, tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Copy each `(name, tensor)` into `model`'s parameter or buffer of that name (cast to its dtype and device);
    returns how many were written. Every name and shape is checked before anything is written. Tied weights share
    one parameter, so writing either name updates both.

    Raises:
        KeyError: a name `model` does not have (the sender and the engine disagree on the model).
        ValueError: a tensor whose shape differs from the parameter's.
    """
    targets = _targets(model)
    tensors = list(tensors)
    for name, tensor in tensors:
        _check_fits(targets, name, tensor.shape)
    with torch.no_grad():
        for name, tensor in tensors:
            targets[name].copy_(tensor)
    return len(tensors)


def check_specs_fit(model: nn.Module, specs: Iterable[TensorSpec]) -> None:
    """Check that every tensor a request names is a parameter or buffer of `model` with that shape, in a floating
    dtype when the target is one: run before receiving, so a request's shapes never size an allocation.

    Raises:
        KeyError: a name `model` does not have.
        ValueError: a shape that differs from the parameter's, or an integer dtype for a floating parameter.
    """
    targets = _targets(model)
    for spec in specs:
        target = _check_fits(targets, spec.name, spec.shape)
        if target.is_floating_point() and not torch_dtype(spec.dtype).is_floating_point:
            raise ValueError(f"{spec.name}: the update sends {spec.dtype}, the engine's parameter is {target.dtype}")


def _targets(model: nn.Module) -> dict[str, torch.Tensor]:
    targets = dict(model.named_parameters(remove_duplicate=False))
    targets.update(model.named_buffers(remove_duplicate=False))
    return targets


def _check_fits(targets: dict[str, torch.Tensor], name: str, shape) -> torch.Tensor:
    target = targets.get(name)
    if target is None:
        raise KeyError(f"the engine's model has no parameter {name!r} (is it the trainer's model?)")
    if tuple(target.shape) != tuple(shape):
        raise ValueError(f"{name}: the update has shape {list(shape)}, the engine's {list(target.shape)}")
    return target
