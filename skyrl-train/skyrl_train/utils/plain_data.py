"""Files of tensors and plain containers: what every checkpoint and training-batch dump holds, and all they may hold.

`torch.load` with ``weights_only=False`` unpickles arbitrary objects, and unpickling can run any code: whoever can
write a checkpoint (a shared disk, the S3 bucket it is resumed or exported from) could run code in the trainer. So
every ``.pt`` file this project writes holds only tensors, ``dict`` / ``list`` / ``tuple`` containers and ``str`` /
``int`` / ``float`` / ``bool`` / ``None`` (numpy arrays and scalars, enums and config objects are converted by the
writer), and is read with ``weights_only=True``, which refuses anything else before building it.

- `save_plain(obj, path)` checks `obj` first and refuses what a plain load could not read back, naming the entry, so
  a checkpoint that would fail at resume time fails when it is written instead.
- `load_plain(path)` loads with ``weights_only=True`` (on the CPU); a file holding anything else (a pickle payload,
  or a checkpoint this fork wrote before it stored plain data only, whose RNG states were numpy arrays) raises
  `NotPlainDataError` naming the file and what it holds, and nothing in it is built.
"""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict
from typing import IO, Any

import torch

__all__ = ["NotPlainDataError", "load_plain", "save_plain"]

_SCALARS = (str, int, float, bool, type(None))
_CONTAINERS = (dict, OrderedDict, list, tuple)


class NotPlainDataError(Exception):
    """A file (to be) read or written holds something other than tensors and plain containers; the message names it.

    Not a `ValueError`, so no handler meant for a checkpoint that does not fit (e.g. another data loader's position)
    takes a refused file for one and carries on."""


def save_plain(obj: Any, path: str | os.PathLike[str]) -> None:
    """`torch.save(obj, path)` after checking that `load_plain` can read `obj` back (see the module doc)."""
    where = _first_not_plain(obj, "")
    if where is not None:
        entry, value = where
        raise NotPlainDataError(
            f"{path}: not written: {entry or 'the object'} is a {type(value).__module__}.{type(value).__qualname__}; "
            "a checkpoint holds only tensors, dict/list/tuple, str, int, float, bool and None"
        )
    torch.save(obj, path)


def load_plain(path: str | os.PathLike[str] | IO[bytes], name: str | None = None) -> Any:
    """What `save_plain` wrote to `path` (a file, or an open binary stream), on the CPU; `NotPlainDataError` when it
    holds other objects, naming `name` (default: `path`).

    Raises:
        NotPlainDataError: the file holds objects other than tensors and plain containers; none of them was built.
        FileNotFoundError: no file at `path`.
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise NotPlainDataError(
            f"{name or path} was not loaded: it holds objects other than tensors and plain containers ({_reason(exc)}), and "
            "unpickling them could run code. A checkpoint written by this project before its checkpoints held plain "
            "data only (numpy RNG states) is refused the same way: resume from a newer checkpoint or start afresh"
        ) from None


def _first_not_plain(value: Any, where: str) -> tuple[str, Any] | None:
    """(path, value) of the first entry of `value` that a weights-only load refuses, or None when it is all plain."""
    if isinstance(value, torch.Tensor) or type(value) in _SCALARS:
        return None
    if type(value) not in _CONTAINERS:
        return where, value
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) not in _SCALARS:
                return f"{where}[{key!r}] (its key)", key
            found = _first_not_plain(item, f"{where}[{key!r}]")
            if found is not None:
                return found
        return None
    for i, item in enumerate(value):
        found = _first_not_plain(item, f"{where}[{i}]")
        if found is not None:
            return found
    return None


_TORCH_BOILERPLATE = ("Weights only load failed", "(1)", "(2)", "Check the documentation", "Please file an issue")


def _reason(exc: pickle.UnpicklingError) -> str:
    """What torch's message says was refused (e.g. "Trying to load unsupported GLOBAL posix.system ..."), without the
    advice to load with ``weights_only=False`` that surrounds it."""
    for line in str(exc).splitlines():
        line = line.split("WeightsUnpickler error:", 1)[-1].strip()
        if line and not line.startswith(_TORCH_BOILERPLATE):
            return line.split(". Please use")[0].rstrip(".")
    return "refused by torch.load(weights_only=True)"
