"""KVBuffer: closing the gaps left by rows leaving, sizing the column headroom, and growing with live rows kept; the
buffer tests run on every available device."""

from __future__ import annotations

import torch

from skyrl_train.inference_engines.hf.kv_buffer import KVBuffer, compaction_plan
from skyrl_train.testing import on_every_device


def test_compaction_moves_only_survivors_from_above_the_new_row_count():
    holes, sources, rows = compaction_plan(6, [1, 4])
    assert (holes.tolist(), sources.tolist(), rows) == ([1], [5], 4)


def test_removing_the_last_rows_moves_nothing():
    holes, sources, rows = compaction_plan(5, [3, 4])
    assert (holes.tolist(), sources.tolist(), rows) == ([], [], 3)


def test_removing_every_row_leaves_an_empty_batch():
    holes, sources, rows = compaction_plan(3, [0, 1, 2])
    assert (holes.tolist(), sources.tolist(), rows) == ([], [], 0)


def layer_kv(rows: int, length: int, fill: float, device: str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two layers of [rows, 1 head, length, 2] keys / values, every number `fill` (+0.5 for values, +10 layer 2)."""
    shape = (rows, 1, length, 2)
    return [
        (torch.full(shape, fill + 10 * layer, device=device), torch.full(shape, fill + 10 * layer + 0.5, device=device))
        for layer in range(2)
    ]


def unrelated(*lengths: int) -> list[list[int]]:
    """Token ids of rows that share no prefix (row i is all i)."""
    return [[row] * length for row, length in enumerate(lengths)]


def test_the_column_headroom_is_what_the_rows_can_still_write_at_most_half_the_width():
    unknown = KVBuffer(max_rows=4)
    unknown.add_rows(layer_kv(2, 1000, 1.0), unrelated(1000, 1000), version=0)
    assert unknown.col_capacity == 1536  # width * 1.5, rounded up to 64 columns
    bounded = KVBuffer(max_rows=4)
    bounded.add_rows(layer_kv(2, 1000, 1.0), unrelated(1000, 1000), version=0, columns_to_come=10)
    assert bounded.col_capacity == 1088  # at least one 64-column step of headroom
    bounded.width = bounded.col_capacity  # decoded up to the last column
    bounded.reserve_step(columns_to_come=200)
    assert bounded.col_capacity == 1344  # 1088 + 200, rounded up to 64 columns


@on_every_device
def test_growing_moves_every_live_row_and_picks_rows_by_source_index(device):
    buffer = KVBuffer(max_rows=4, device=device)
    buffer.add_rows(layer_kv(1, 3, 1.0, device), unrelated(3), version=0, columns_to_come=1)
    prefilled = layer_kv(2, 5, 2.0, device)
    prefilled[0][0][1] += 100  # the second prefilled row differs
    # wider than the buffer: it grows
    buffer.add_rows(prefilled, unrelated(5, 5)[::-1], version=0, source_rows=[1, 0])
    assert buffer.rows == 3 and buffer.width == 5
    (keys, values), row1, row2 = buffer.rows_kv([0, 1, 2])
    assert keys[1].device.type == device and buffer.start.device.type == device
    assert keys[1].shape == (1, 3, 2) and float(keys[1].min()) == float(keys[1].max()) == 11.0
    assert float(values[0].max()) == 1.5
    assert float(row1[0][0].max()) == 102.0 and float(row2[0][0].max()) == 2.0


def token_kv(tokens: list[list[int]], device: str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two layers of left-padded [rows, 1 head, longest, 2] keys / values holding each column's token id (values
    negated, +1000 in layer 2), padding 0: a row's KV shows which tokens it holds."""
    width = max(len(t) for t in tokens)
    ids = torch.zeros(len(tokens), 1, width, 2)
    for row, t in enumerate(tokens):
        ids[row, 0, width - len(t) :] = torch.tensor(t, dtype=torch.float)[:, None]
    ids = ids.to(device)
    return [(ids + 1000 * layer, -ids - 1000 * layer) for layer in range(2)]


def assert_holds(buffer: KVBuffer, row: int, tokens: list[int]) -> None:
    [(keys, values)] = buffer.rows_kv([row])
    for layer in range(2):
        expected = torch.tensor(tokens, dtype=torch.float) + 1000 * layer
        assert torch.equal(keys[layer][0, :, 0].cpu(), expected) and torch.equal(
            values[layer][0, :, 1].cpu(), -expected
        )


PREFIX = list(range(1, 101))


@on_every_device
def test_rows_joining_an_empty_batch_keep_the_prefix_they_share_once(device):
    buffer = KVBuffer(max_rows=4, device=device)
    rows = [PREFIX + [7, 8, 9], PREFIX + [5]]
    buffer.add_rows(token_kv(rows, device), rows, version=3)
    assert buffer.prefix_length == 100 and buffer.width == 3  # each row stores only what follows the prefix
    assert buffer.positions()[:, 0].tolist() == [103, 101]
    mask = buffer.attention_mask()
    assert mask.device.type == device and mask.tolist() == [[1, 1, 1, 1], [0, 0, 1, 1]]
    shared = buffer.shared_prefix(mask)
    assert shared.keys[0].device.type == device and shared.own_bias.device.type == device
    assert shared.own_bias[:, 0, 0].tolist() == [[0, 0, 0, 0], [float("-inf"), float("-inf"), 0, 0]]
    assert_holds(buffer, 0, rows[0])
    assert_holds(buffer, 1, rows[1])


def test_identical_prompts_share_all_of_it_and_their_rows_start_empty():
    buffer = KVBuffer(max_rows=4)
    rows = [PREFIX, PREFIX]  # the n samples of one GRPO prompt
    buffer.add_rows(token_kv(rows), rows, version=0)
    assert buffer.prefix_length == 100 and buffer.width == 0
    assert buffer.positions()[:, 0].tolist() == [100, 100] and buffer.attention_mask().tolist() == [[1], [1]]
    assert_holds(buffer, 1, PREFIX)


def test_with_sharing_off_every_row_keeps_its_whole_kv():
    buffer = KVBuffer(max_rows=4, share_prefix=False)
    rows = [PREFIX + [7, 8, 9], PREFIX + [5]]
    buffer.add_rows(token_kv(rows), rows, version=3)
    assert buffer.prefix_length == 0 and buffer.width == 103
    assert_holds(buffer, 1, rows[1])


@on_every_device
def test_a_row_sharing_less_of_the_prefix_narrows_it_and_live_rows_keep_their_kv(device):
    buffer = KVBuffer(max_rows=4, device=device)
    rows = [PREFIX + [7, 8, 9], PREFIX + [5]]
    buffer.add_rows(token_kv(rows, device), rows, version=3)
    joining = [PREFIX[:70] + [500, 501]]
    buffer.add_rows(token_kv(joining, device), joining, version=3)
    assert buffer.prefix_length == 70 and buffer.positions()[:, 0].tolist() == [103, 101, 72]
    for row, tokens in enumerate(rows + joining):
        assert_holds(buffer, row, tokens)


def test_a_row_from_other_weights_or_sharing_too_little_ends_the_sharing():
    for joining, version in [([PREFIX + [6]], 4), ([PREFIX[:10] + [6]], 3)]:
        buffer = KVBuffer(max_rows=4)
        rows = [PREFIX + [7, 8, 9], PREFIX + [5]]
        buffer.add_rows(token_kv(rows), rows, version=3)
        buffer.add_rows(token_kv(joining), joining, version=version)
        assert buffer.prefix_length == 0 and buffer.shared_prefix(buffer.attention_mask()) is None
        for row, tokens in enumerate(rows + joining):
            assert_holds(buffer, row, tokens)


@on_every_device
def test_a_row_leaving_is_replaced_by_the_last_live_row_and_the_others_stay(device):
    buffer = KVBuffer(max_rows=4, device=device)
    rows = [[1, 2], [3, 4, 5], [6]]
    buffer.add_rows(token_kv(rows, device), rows, version=0)
    holes, sources, count = compaction_plan(3, [0])
    buffer.move_rows(holes.to(device), sources.to(device), count)
    assert buffer.rows == 2 and buffer.positions()[:, 0].tolist() == [1, 3]
    assert_holds(buffer, 0, [6])
    assert_holds(buffer, 1, [3, 4, 5])
