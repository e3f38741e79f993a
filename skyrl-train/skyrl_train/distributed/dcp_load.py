"""`load_dcp`: `torch.distributed.checkpoint.load` without unpickling arbitrary objects.

A DCP folder keeps its index (``.metadata``) as a plain pickle, and each non-tensor entry of the state (e.g. the
optimizer's ``param_groups`` values) as a ``torch.save`` blob; DCP's reader unpickles both without restriction
(``pickle.load``, ``torch.load(weights_only=False)``), so a crafted checkpoint would run code on resume or export.
`load_dcp` checks the index first with an unpickler that builds only DCP's own metadata classes (and the torch
sizes, dtypes, layouts and paths they hold), and each blob with ``weights_only=True`` before DCP reads it; anything
else raises `NotPlainDataError` naming the file or entry (a blob's error reaches the caller wrapped in DCP's
``CheckpointException``, as every error raised during a DCP load does).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.planner import ReadItem

from skyrl_train.utils.plain_data import NotPlainDataError, load_plain

__all__ = ["load_dcp"]

DCP_INDEX_FILE = ".metadata"
"""The index file DCP's filesystem writer puts in a checkpoint folder."""

_INDEX_GLOBALS = frozenset(
    {
        ("torch.distributed.checkpoint.metadata", name)
        for name in (
            "Metadata",
            "StorageMeta",
            "MetadataIndex",
            "TensorProperties",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "_MEM_FORMAT_ENCODING",
        )
    }
    | {
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),
        ("pathlib", "PosixPath"),
        ("collections", "OrderedDict"),
    }
)
"""What a DCP index may name: DCP's metadata dataclasses and enum, and the torch / pathlib values they hold."""


def load_dcp(state: dict[str, Any], folder: str | Path) -> None:
    """`dcp.load(state, checkpoint_id=folder)` (fills `state` in place) after the checks of the module doc.

    Raises:
        NotPlainDataError: the index names something other than DCP's metadata.
        torch.distributed.checkpoint.api.CheckpointException: DCP's load failed, a blob that is not plain data included.
    """
    folder = Path(folder)
    _check_index(folder / DCP_INDEX_FILE)
    dcp.load(state, checkpoint_id=str(folder), planner=_PlainBlobsPlanner(folder))


class _IndexUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _INDEX_GLOBALS or (
            module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which is not part of a DCP index")


def _check_index(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            _IndexUnpickler(f).load()
    except pickle.UnpicklingError as exc:
        raise NotPlainDataError(f"{path} was not loaded: {exc}; unpickling it could run code") from None


class _PlainBlobsPlanner(dcp.DefaultLoadPlanner):
    """DCP's default planner, but each non-tensor blob must load with ``weights_only=True`` first."""

    def __init__(self, folder: Path):
        super().__init__()
        self.folder = folder

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        load_plain(value, name=f"entry {read_item.dest_index.fqn!r} of {self.folder}")
        value.seek(0)
        super().load_bytes(read_item, value)
