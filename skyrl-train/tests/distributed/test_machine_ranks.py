"""How many fsdp2 ranks the distributed tests run (`machine_ranks`): one per GPU, rounded down to a power of two and
capped; 0 when the groups cannot each have a GPU of their own; 2 gloo ranks on a machine without GPUs."""

from __future__ import annotations

import pytest

import skyrl_train.testing.ray
from skyrl_train.testing.ray import machine_ranks


@pytest.mark.parametrize(
    ("gpus", "groups", "expected"),
    [(0, 1, 2), (0, 2, 2), (1, 1, 1), (1, 2, 0), (2, 2, 1), (3, 1, 2), (8, 1, 4), (8, 2, 4)],
)
def test_ranks_follow_the_gpus_of_the_machine(monkeypatch, gpus, groups, expected):
    monkeypatch.setattr(skyrl_train.testing.ray, "machine_gpus", lambda: gpus)
    assert machine_ranks(groups=groups, at_most=4) == expected
