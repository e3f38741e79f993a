"""`split_by_tail_length`: which prompts of a prefill group share a forward."""

from __future__ import annotations

import itertools
import random

import pytest

from skyrl_train.inference_engines.hf.prefill_split import FORWARD_COST_TOKENS, split_by_tail_length


def cost(tails: list[int], parts: list[list[int]], forward_cost: int = FORWARD_COST_TOKENS) -> int:
    return sum(forward_cost + len(part) * max(tails[i] for i in part) for part in parts)


def set_partitions(items: list[int]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in set_partitions(rest):
        yield [[first], *partition]
        for k in range(len(partition)):
            yield [*partition[:k], [first, *partition[k]], *partition[k + 1 :]]


def test_a_month_of_prices_beside_first_turns_is_fed_apart_from_them():
    # The main job's eval: two rows after a ~500-token tool result, three first turns of ~35 tokens.
    tails = [35, 35, 496, 35, 497]
    assert split_by_tail_length(tails) == [[2, 4], [0, 1, 3]]
    assert cost(tails, [[2, 4], [0, 1, 3]]) < cost(tails, [list(range(5))])


@pytest.mark.parametrize("tails", [[30], [30, 30, 30, 30], [28, 31, 35, 30], [400, 420, 410]])
def test_tails_of_similar_length_share_one_forward(tails):
    assert split_by_tail_length(tails) == [list(range(len(tails)))]


def test_no_split_is_cheaper_than_the_one_chosen():
    rng = random.Random(0)
    for _ in range(60):
        tails = [rng.choice([1, 20, 35, 80, 100, 300, 500]) + rng.randrange(5) for _ in range(rng.randint(1, 7))]
        parts = split_by_tail_length(tails)
        assert sorted(itertools.chain(*parts)) == list(range(len(tails)))
        assert all(part == sorted(part) for part in parts)
        assert cost(tails, parts) == min(cost(tails, p) for p in set_partitions(list(range(len(tails)))))


def test_equal_tails_are_never_split():
    tails = [500, 35, 35, 35, 35, 35, 35, 35, 35, 500, 36]
    for forward_cost in (0, 1, 64, 1000):
        for part in split_by_tail_length(tails, forward_cost):
            assert {i for i, tail in enumerate(tails) if tail in {tails[j] for j in part}} == set(part)


def test_a_free_forward_splits_every_length_and_a_costly_one_none():
    tails = [10, 20, 20, 30]
    assert split_by_tail_length(tails, forward_cost_tokens=0) == [[3], [1, 2], [0]]
    assert split_by_tail_length(tails, forward_cost_tokens=10_000) == [[0, 1, 2, 3]]


def test_no_tails_no_parts_and_an_empty_tail_is_refused():
    assert split_by_tail_length([]) == []
    with pytest.raises(ValueError, match="at least one token"):
        split_by_tail_length([3, 0])
