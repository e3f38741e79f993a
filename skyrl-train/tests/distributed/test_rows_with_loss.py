"""`rows_with_loss`: the rows a forward must cover when its result matters only under the loss mask."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.distributed.sharding import rows_with_loss

MASK = torch.tensor([[0, 0], [1, 0], [0, 0], [0, 1], [1, 1], [0, 0]])  # rows 1, 3 and 4 have a loss token


@pytest.mark.parametrize(
    ("dp", "expected"),
    [
        (1, [1, 3, 4]),
        (2, [0, 1, 3, 4]),  # three rows with loss, topped up with the first row without one
        (3, [1, 3, 4]),
        (6, [0, 1, 2, 3, 4, 5]),
    ],
)
def test_the_rows_with_a_loss_token_are_topped_up_to_a_multiple_of_the_ranks(dp, expected):
    assert rows_with_loss(MASK, dp).tolist() == expected


def test_a_batch_without_loss_tokens_needs_no_rows():
    assert rows_with_loss(torch.zeros(4, 3), 2).tolist() == []
