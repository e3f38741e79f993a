"""A resumable prompt loader: its ``state_dict`` records where in which epoch it stopped.

Batch ``k`` of epoch ``e`` is always the same: the order of an epoch is a permutation drawn from a generator seeded
with ``seed + e``, so a loader restored from a checkpoint yields exactly the batches the interrupted run had not
yet consumed, in the same order, and later epochs reshuffle exactly as they would have.

With ``groups`` (one label per dataset row, e.g. its data source), a shuffled epoch takes the groups in turn:
each group is shuffled, and round ``r`` appends the ``r``-th row of every group that has one, the groups in a fresh
random order each round. Batches then hold the groups in equal shares as far as the group sizes allow (4 equal
groups and batches of 4: one row of each group per batch), instead of whatever mix a plain shuffle draws.

Each ``iter(loader)`` continues from the current position to the end of the current epoch; when the last batch
of an epoch is handed out the loader moves to the start of the next epoch. So the trainer's
``for epoch in range(start_epoch, epochs): for batch in loader:`` works for fresh and resumed runs alike. Only one
iterator should be live at a time (they share the position).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import torch

_STATE_CHECKED = ("dataset_size", "batch_size", "shuffle", "drop_last", "seed", "grouped")
_STATE_DEFAULTS = {"grouped": False}
"""Values of keys that states saved before the key existed lack."""


class PromptDataLoader:
    """Batches of ``collate_fn([dataset[i] for i in batch_indices])`` (default: ``dataset.collate_fn``)."""

    def __init__(
        self,
        dataset: Sequence[Any],
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = True,
        seed: int = 42,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        groups: Sequence[Hashable] | None = None,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if groups is not None and len(groups) != len(dataset):
            raise ValueError(f"groups has {len(groups)} labels for a dataset of {len(dataset)} rows")
        self.groups = None if groups is None else list(groups)
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.collate_fn = collate_fn if collate_fn is not None else dataset.collate_fn
        self.epoch = 0
        self.position = 0
        """Batches of ``epoch`` already handed out."""

    @classmethod
    def for_eval(cls, dataset: Sequence[Any], batch_size: int, **kwargs: Any) -> PromptDataLoader:
        """Every row once, in dataset order: no shuffle, last partial batch kept."""
        return cls(dataset, batch_size, shuffle=False, drop_last=False, **kwargs)

    def __len__(self) -> int:
        """Batches per epoch."""
        full, rest = divmod(len(self.dataset), self.batch_size)
        return full if self.drop_last or rest == 0 else full + 1

    def epoch_order(self, epoch: int) -> list[int]:
        """Dataset indices in the order epoch ``epoch`` visits them."""
        if not self.shuffle:
            return list(range(len(self.dataset)))
        generator = torch.Generator().manual_seed(self.seed + epoch)
        if self.groups is None:
            return torch.randperm(len(self.dataset), generator=generator).tolist()
        members: dict[Hashable, list[int]] = {}
        for index, label in enumerate(self.groups):
            members.setdefault(label, []).append(index)
        shuffled = [
            [rows[i] for i in torch.randperm(len(rows), generator=generator).tolist()] for rows in members.values()
        ]
        order = []
        for round_ in range(max(map(len, shuffled))):
            for group in torch.randperm(len(shuffled), generator=generator).tolist():
                if round_ < len(shuffled[group]):
                    order.append(shuffled[group][round_])
        return order

    def __iter__(self) -> Iterator[Any]:
        epoch, num_batches = self.epoch, len(self)
        order = self.epoch_order(epoch)
        for k in range(self.position, num_batches):
            indices = order[k * self.batch_size : (k + 1) * self.batch_size]
            # Advance before yielding, so a state_dict taken while the batch is being used already counts it.
            self.epoch, self.position = (epoch + 1, 0) if k + 1 == num_batches else (epoch, k + 1)
            yield self.collate_fn([self.dataset[i] for i in indices])

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "dataset_size": len(self.dataset),
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "seed": self.seed,
            "grouped": self.groups is not None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at ``state``'s epoch and position. Raises ``ValueError`` naming the setting if the dataset size,
        batch size, shuffle, drop_last, seed or grouping differ, since the saved position would then point
        elsewhere."""
        for key in _STATE_CHECKED:
            saved = state.get(key, _STATE_DEFAULTS.get(key))
            if saved != self.state_dict()[key]:
                raise ValueError(
                    f"data loader state was saved with {key}={saved!r}, but this loader has "
                    f"{key}={self.state_dict()[key]!r}; its position does not apply"
                )
        if not 0 <= state["position"] < max(len(self), 1):
            raise ValueError(f"data loader state position {state['position']} is outside 0..{len(self) - 1}")
        self.epoch, self.position = state["epoch"], state["position"]
