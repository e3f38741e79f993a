"""``TrainingInputBatch``: the tensors of one training step, all sharing their first (batch) dimension.

Keys follow upstream: ``sequences``, ``attention_mask``, ``response_mask``, ``loss_mask``, ``rewards``,
``rollout_logprobs``, ``is_last_step``, later ``action_log_probs``, ``base_action_log_probs``, ``values``,
``advantages``, ``returns``. A value may be None (e.g. ``rollout_logprobs`` when the engine returned none); None
values ride along through every operation.

``metadata`` (``uids``, ``response_length``, ``global_step``, ...) describes the batch as a whole and is copied
unchanged (shallowly) by slicing, chunking, repeating and ``to``; ``cat`` keeps the first batch's. Per-row data that
must follow rows through those operations belongs in a tensor.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from skyrl_train.utils.plain_data import load_plain, save_plain

Value = torch.Tensor | None


class TrainingInputBatch(dict[str, Value]):
    """A dict of tensors with equal batch size, plus ``metadata``.

    ``batch[key]`` returns a tensor; ``batch[2:5]``, ``batch[3]`` (a one-row batch), ``batch[[0, 2]]`` or a boolean
    row mask return a new batch of those rows. ``len(batch)`` is the number of keys, as for any dict; ``batch.batch_size`` the rows.
    """

    def __init__(self, tensors: dict[str, Value] | None = None, metadata: dict[str, Any] | None = None):
        super().__init__()
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.update(tensors or {})

    @property
    def batch_size(self) -> int:
        """Rows in the batch (0 when it holds no tensor)."""
        for value in self.values():
            if value is not None:
                return value.shape[0]
        return 0

    def _check(self, key: str, value: Value) -> None:
        if not isinstance(key, str):
            raise TypeError(f"TrainingInputBatch keys are strings, got {key!r}")
        if value is None:
            return
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{key!r}: expected a torch.Tensor or None, got {type(value).__name__}")
        if value.dim() == 0:
            raise ValueError(f"{key!r}: a 0-dim tensor has no batch dimension")
        for other, existing in self.items():
            if other != key and existing is not None:
                if value.shape[0] != existing.shape[0]:
                    raise ValueError(
                        f"{key!r} has batch size {value.shape[0]}, but the batch has {existing.shape[0]} rows "
                        f"(from {other!r})"
                    )
                return

    def __setitem__(self, key: str, value: Value) -> None:
        self._check(key, value)
        super().__setitem__(key, value)

    def update(self, other: Any = (), /, **kwargs: Value) -> None:
        for key, value in dict(other, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Value = None) -> Value:
        if key not in self:
            self[key] = default
        return self[key]

    def __ior__(self, other: Any) -> TrainingInputBatch:
        self.update(other)
        return self

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return super().__getitem__(key)
        if isinstance(key, int):
            row = range(self.batch_size)[key]  # IndexError past the end; negative indices count from the end
            key = slice(row, row + 1)
        elif not isinstance(key, slice):
            key = torch.as_tensor(key)  # row indices, or a boolean row mask
        return self._map(lambda t: t[key])

    def _map(self, fn: Any) -> TrainingInputBatch:
        return TrainingInputBatch({k: None if v is None else fn(v) for k, v in self.items()}, self.metadata)

    def select(self, keys: Iterable[str], metadata_keys: Iterable[str] | None = None) -> TrainingInputBatch:
        """A batch with only ``keys`` (and only ``metadata_keys`` of the metadata, if given)."""
        keys = list(keys)
        missing = [k for k in keys if k not in self]
        if missing:
            raise KeyError(f"select: no key(s) {missing} in the batch (keys: {sorted(self)})")
        metadata = self.metadata if metadata_keys is None else {k: self.metadata[k] for k in metadata_keys}
        return TrainingInputBatch({k: self[k] for k in keys}, metadata)

    def chunk(self, chunk_size: int) -> list[TrainingInputBatch]:
        """Consecutive batches of ``chunk_size`` rows (the last one smaller if the size does not divide)."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        return [self[start : start + chunk_size] for start in range(0, self.batch_size, chunk_size)]

    @staticmethod
    def cat(batches: Sequence[TrainingInputBatch]) -> TrainingInputBatch:
        """Rows of all ``batches`` in order. They must have the same keys; metadata is the first batch's."""
        if not batches:
            raise ValueError("cat needs at least one batch")
        keys = list(batches[0])
        for i, batch in enumerate(batches):
            if set(batch) != set(keys):
                raise ValueError(f"cat: batch {i} has keys {sorted(batch)}, batch 0 has {sorted(keys)}")
        tensors: dict[str, Value] = {}
        for key in keys:
            values = [batch[key] for batch in batches]
            if all(v is None for v in values):
                tensors[key] = None
            elif any(v is None for v in values):
                raise ValueError(f"cat: {key!r} is None in some batches and a tensor in others")
            else:
                tensors[key] = torch.cat(values)
        return TrainingInputBatch(tensors, batches[0].metadata)

    def repeat(self, repeats: int) -> TrainingInputBatch:
        """The whole batch ``repeats`` times: rows a, b become a, b, a, b."""
        return self._map(lambda t: t.repeat(repeats, *([1] * (t.dim() - 1))))

    def repeat_interleave(self, repeats: int) -> TrainingInputBatch:
        """Each row ``repeats`` times in place: rows a, b become a, a, b, b."""
        return self._map(lambda t: t.repeat_interleave(repeats, dim=0))

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> TrainingInputBatch:
        """A copy on ``device``; ``dtype`` converts floating-point tensors only (token ids and masks keep theirs)."""
        return self._map(
            lambda t: t.to(device=device, dtype=dtype if dtype is not None and t.is_floating_point() else None)
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the batch as plain data (`skyrl_train.utils.plain_data`): its metadata must hold only plain values
        (str, numbers, bool, None, lists, tuples, dicts), or `NotPlainDataError` names the entry."""
        save_plain({"tensors": dict(self), "metadata": self.metadata}, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TrainingInputBatch:
        """Read a ``save``d batch; a file holding anything but plain data is refused (`NotPlainDataError`)."""
        data = load_plain(path)
        return cls(data["tensors"], data["metadata"])

    def __reduce__(self) -> tuple[Any, ...]:
        # dict subclasses otherwise unpickle their items before their __dict__, i.e. through __setitem__ with no
        # metadata yet; rebuilding through the constructor keeps the checks and the attribute order simple.
        return (TrainingInputBatch, (dict(self), self.metadata))

    def __repr__(self) -> str:
        shapes = {k: None if v is None else (tuple(v.shape), str(v.dtype)) for k, v in self.items()}
        return f"TrainingInputBatch(batch_size={self.batch_size}, tensors={shapes}, metadata={self.metadata})"
