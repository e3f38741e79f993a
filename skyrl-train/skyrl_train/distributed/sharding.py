"""How the driver splits a training batch over the data-parallel ranks of a worker group.

- forward passes (logprobs, values): ``split_rows`` gives rank r the r-th of ``dp`` equal contiguous parts, and the
  results are concatenated back in rank order;
- forward passes whose results matter only under the loss mask (the reference logprobs of a KL loss):
  ``rows_with_loss`` picks the rows to run, topped up to a multiple of ``dp``;
- PPO updates: ``shard_for_update`` gives rank r the r-th part of *every* mini-batch, concatenated, so that the
  ranks' local mini-batch k (``mini_batch_size / dp`` rows) together are exactly the global mini-batch k that the
  single-process worker would train on.

Equal parts keep every rank at the same number of micro-batches, which FSDP needs (each forward is a collective).
"""

from __future__ import annotations

import torch

from skyrl_train.training_batch import TrainingInputBatch

__all__ = ["rows_with_loss", "split_rows", "shard_for_update"]


def split_rows(batch: TrainingInputBatch, dp: int) -> list[TrainingInputBatch]:
    """``dp`` equal contiguous parts of ``batch``.

    Raises:
        ValueError: the batch size is not a multiple of ``dp``.
    """
    if batch.batch_size % dp:
        raise ValueError(
            f"a batch of {batch.batch_size} rows cannot be split evenly over {dp} data-parallel workers; make "
            "trainer.train_batch_size x generator.n_samples_per_prompt a multiple of the worker count"
        )
    return batch.chunk(batch.batch_size // dp)


def rows_with_loss(loss_mask: torch.Tensor, dp: int) -> torch.Tensor:
    """Indices (ascending) of the rows of ``loss_mask`` ``[B, R]`` that have a loss token, with as many rows without
    one as it takes to make their number a multiple of ``dp`` (``split_rows`` needs equal parts). ``B`` is a multiple
    of ``dp``, so there are always enough."""
    has_loss = loss_mask.bool().any(dim=1)
    rows = has_loss.nonzero().flatten()
    missing = -len(rows) % dp
    if missing:
        rows = torch.cat([rows, (~has_loss).nonzero().flatten()[:missing]]).sort().values
    return rows


def shard_for_update(batch: TrainingInputBatch, mini_batch_size: int, dp: int) -> tuple[list[TrainingInputBatch], int]:
    """Per-rank shards for ``ppo_train`` and the per-rank mini-batch size (``mini_batch_size / dp``).

    Raises:
        ValueError: ``mini_batch_size`` or a mini-batch (the last may be shorter) is not a multiple of ``dp``.
    """
    if mini_batch_size % dp:
        raise ValueError(
            f"a mini-batch of {mini_batch_size} rows cannot be split evenly over {dp} data-parallel workers; make "
            "the mini-batch size (x generator.n_samples_per_prompt) a multiple of the worker count"
        )
    parts = [split_rows(mini_batch, dp) for mini_batch in batch.chunk(mini_batch_size)]
    return [TrainingInputBatch.cat([mini[rank] for mini in parts]) for rank in range(dp)], mini_batch_size // dp
