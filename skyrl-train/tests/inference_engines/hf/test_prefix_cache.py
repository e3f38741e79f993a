"""PrefixCache: longest-common-prefix lookup, covering entries, the byte budget (capped by free GPU memory), weight
versions, and entries kept on the device of their KV."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.inference_engines.hf.prefix_cache import BLOCK_TOKENS, PrefixCache, prefix_cache_budget
from skyrl_train.testing import on_every_device

LAYERS, HEADS, DIM = 2, 1, 4
BYTES_PER_TOKEN = LAYERS * 2 * HEADS * DIM * 4  # keys + values, fp32
V = 0  # the weight version of every entry, except in the version tests


def kv(tokens: list[int], device: str = "cpu") -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per-layer KV whose values encode (layer, position, token), so a test can tell which entry served a match."""
    keys = [
        torch.tensor([[[layer, pos, tok, 0] for pos, tok in enumerate(tokens)]], dtype=torch.float32, device=device)
        for layer in range(LAYERS)
    ]
    return keys, [k + 0.5 for k in keys]


def insert(cache: PrefixCache, tokens: list[int], version: int = 0) -> None:
    cache.insert(tokens, *kv(tokens), version)


def test_match_returns_the_entry_with_the_longest_common_prefix_and_leaves_the_last_token_to_feed():
    cache = PrefixCache(max_bytes=10**6)
    insert(cache, [1, 2, 3, 4, 5])
    insert(cache, [1, 2, 9, 9])
    entry, length = cache.match([1, 2, 3, 7], V)
    assert length == 3 and entry.tokens.tolist() == [1, 2, 3, 4, 5]
    assert cache.match([1, 2, 3, 4, 5], V)[1] == 4  # the whole prompt is cached: its last token is still fed
    assert cache.match([1, 2, 3, 4, 5], V, max_length=5)[1] == 5
    assert cache.match([7, 1, 2], V) == (None, 0)
    assert cache.match([1], V)[1] == 0


def test_an_entry_covered_by_a_longer_one_is_not_kept_twice():
    cache = PrefixCache(max_bytes=10**6)
    insert(cache, [1, 2, 3])
    insert(cache, [1, 2, 3, 4, 5])  # the next turn of the same conversation replaces the shorter entry
    assert len(cache) == 1 and cache.nbytes == 5 * BYTES_PER_TOKEN
    insert(cache, [1, 2])  # already covered
    assert len(cache) == 1
    entry, _ = cache.match([1, 2, 3, 4, 5, 6], V)
    assert entry.kv(1)[0][0, 4].tolist() == [1, 4, 5, 0] and entry.kv(0)[1][0, 2].tolist() == [0.5, 2.5, 3.5, 0.5]


def test_the_least_recently_used_entries_go_when_the_byte_budget_is_exceeded():
    cache = PrefixCache(max_bytes=8 * BYTES_PER_TOKEN)
    insert(cache, [1, 1, 1, 1])
    insert(cache, [2, 2, 2, 2])
    cache.match([1, 1, 1, 9], V)  # a hit makes [1, 1, 1, 1] the most recently used
    insert(cache, [3, 3, 3])
    assert cache.match([2, 2, 2, 9], V) == (None, 0)
    assert cache.match([1, 1, 1, 9], V)[1] == 3 and cache.match([3, 3, 9], V)[1] == 2
    assert cache.nbytes == 7 * BYTES_PER_TOKEN
    insert(cache, list(range(10, 19)))  # larger than the whole budget: not cached, nothing evicted for it
    assert len(cache) == 2


def test_inserted_kv_is_copied_so_the_caller_may_overwrite_its_buffer():
    cache = PrefixCache(max_bytes=10**6)
    keys, values = kv([5, 6])
    cache.insert([5, 6], keys, values, V)
    keys[0].zero_()
    assert cache.match([5, 6, 7], V)[0].kv(0)[0][0, 1].tolist() == [0, 1, 6, 0]


def test_disabled_cache_stores_nothing_and_bad_arguments_are_refused():
    disabled = PrefixCache(max_bytes=0)
    insert(disabled, [1, 2, 3])
    assert not disabled.enabled and len(disabled) == 0
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixCache(max_bytes=-1)
    with pytest.raises(ValueError, match="3 tokens"):
        PrefixCache(max_bytes=10**6).insert([1, 2, 3], *kv([1, 2]), V)


def test_clear_empties_the_cache():
    cache = PrefixCache(max_bytes=10**6)
    insert(cache, [1, 2, 3])
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0 and cache.match([1, 2, 3, 4], V) == (None, 0)


def test_a_lookup_under_a_newer_weight_version_misses_and_drops_the_older_entries():
    cache = PrefixCache(max_bytes=10**6)
    insert(cache, [1, 2, 3, 4], version=3)
    assert cache.match([1, 2, 3, 4, 5], 3)[1] == 4
    assert cache.match([1, 2, 3, 4, 5], 4) == (None, 0)
    assert len(cache) == 0 and cache.nbytes == 0 and cache.version == 4
    assert cache.match([1, 2, 3, 4, 5], 3) == (None, 0)  # an older version never matches


def test_kv_computed_under_an_older_weight_version_is_not_cached():
    cache = PrefixCache(max_bytes=10**6)
    insert(cache, [1, 2, 3], version=5)
    insert(cache, [1, 2, 3, 4, 5], version=4)  # a request that started before the weight change finishes now
    assert cache.match([1, 2, 3, 4, 5, 6], 5)[0].tokens.tolist() == [1, 2, 3]
    insert(cache, [7, 8, 9], version=6)
    assert len(cache) == 1 and cache.match([1, 2, 3, 4], 6) == (None, 0)


def test_entries_that_start_alike_hold_their_common_blocks_once():
    cache = PrefixCache(max_bytes=10**6)
    system = list(range(100, 100 + 2 * BLOCK_TOKENS + 10))  # two full blocks and 10 tokens in common
    first, second = system + [1] * 30, system + [2] * 30
    insert(cache, first)
    insert(cache, second)
    # each entry: 2 full blocks + a tail of 40; the 2 blocks of the common prefix are stored once
    assert cache.nbytes == (2 * BLOCK_TOKENS + 2 * 40) * BYTES_PER_TOKEN
    for tokens in (first, second):
        entry, length = cache.match(tokens + [7], V)
        assert length == len(tokens) and entry.tokens.tolist() == tokens
        keys, values = entry.kv(1)
        expected, _ = kv(tokens)
        assert torch.equal(keys, expected[1]) and torch.equal(values, expected[1] + 0.5)


def test_a_block_is_freed_with_the_last_entry_using_it():
    prefix = list(range(BLOCK_TOKENS))  # exactly one block
    cache = PrefixCache(max_bytes=(BLOCK_TOKENS + 2 * 3) * BYTES_PER_TOKEN)
    insert(cache, prefix + [1, 1, 1])
    insert(cache, prefix + [2, 2, 2])
    assert len(cache) == 2 and cache.nbytes == (BLOCK_TOKENS + 6) * BYTES_PER_TOKEN
    insert(cache, prefix + [3, 3, 3])  # over budget: the least recently used entry goes, the shared block stays
    assert len(cache) == 2 and cache.nbytes == (BLOCK_TOKENS + 6) * BYTES_PER_TOKEN
    assert cache.match(prefix + [1, 1, 1, 9], V)[1] == BLOCK_TOKENS
    insert(cache, [5] * (BLOCK_TOKENS + 3))  # shares nothing: both older entries, and the shared block, go
    assert len(cache) == 1 and cache.nbytes == (BLOCK_TOKENS + 3) * BYTES_PER_TOKEN


def test_a_longer_turn_replacing_its_shorter_entry_keeps_the_shared_blocks():
    turn1 = list(range(2 * BLOCK_TOKENS + 5))
    turn2 = turn1 + list(range(500, 500 + BLOCK_TOKENS))
    cache = PrefixCache(max_bytes=10**6)
    insert(cache, turn1)
    insert(cache, turn2)
    assert len(cache) == 1 and cache.nbytes == len(turn2) * BYTES_PER_TOKEN
    entry, length = cache.match(turn2 + [1], V)
    assert length == len(turn2)
    keys, _ = entry.kv(0, length=2 * BLOCK_TOKENS + 7)  # crosses from the blocks into the tail
    assert torch.equal(keys, kv(turn2)[0][0][:, : 2 * BLOCK_TOKENS + 7])


def test_the_budget_is_the_requested_bytes_on_the_cpu_and_at_most_half_the_free_gpu_memory():
    assert prefix_cache_budget(2 * 10**9, None) == 2 * 10**9
    assert prefix_cache_budget(2 * 10**9, 10 * 10**9) == 2 * 10**9
    assert prefix_cache_budget(2 * 10**9, 3 * 10**9) == 15 * 10**8
    assert prefix_cache_budget(0, 3 * 10**9) == 0


@on_every_device
def test_entries_stay_on_the_device_of_their_kv_across_blocks_and_tail(device):
    tokens = list(range(BLOCK_TOKENS + 5))
    cache = PrefixCache(max_bytes=10**6)
    cache.insert(tokens, *kv(tokens, device), V)
    entry, length = cache.match(tokens + [1], V)
    assert length == len(tokens)
    assert {entry.blocks[0].keys.device.type, entry.tail_keys.device.type} == {device}
    keys, values = entry.kv(1)
    assert keys.device.type == device
    expected_keys, expected_values = kv(tokens)
    assert torch.equal(keys.cpu(), expected_keys[1]) and torch.equal(values.cpu(), expected_values[1])
