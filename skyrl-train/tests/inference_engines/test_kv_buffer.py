"""KVBuffer: closing the gaps left by rows leaving, sizing the column headroom, and growing with live rows kept."""

from __future__ import annotations

import torch

from skyrl_train.inference_engines.kv_buffer import KVBuffer, compaction_plan


def test_compaction_moves_only_survivors_from_above_the_new_row_count():
    holes, sources, rows = compaction_plan(6, [1, 4])
    assert (holes.tolist(), sources.tolist(), rows) == ([1], [5], 4)


def test_removing_the_last_rows_moves_nothing():
    holes, sources, rows = compaction_plan(5, [3, 4])
    assert (holes.tolist(), sources.tolist(), rows) == ([], [], 3)


def test_removing_every_row_leaves_an_empty_batch():
    holes, sources, rows = compaction_plan(3, [0, 1, 2])
    assert (holes.tolist(), sources.tolist(), rows) == ([], [], 0)


def layer_kv(rows: int, length: int, fill: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two layers of [rows, 1 head, length, 2] keys / values, every number `fill` (+0.5 for values, +10 layer 2)."""
    return [
        (torch.full((rows, 1, length, 2), fill + 10 * layer), torch.full((rows, 1, length, 2), fill + 10 * layer + 0.5))
        for layer in range(2)
    ]


def test_the_column_headroom_is_what_the_rows_can_still_write_at_most_half_the_width():
    unknown = KVBuffer(max_rows=4)
    unknown.add_rows(layer_kv(1, 1000, 1.0), [1000])
    assert unknown.col_capacity == 1536  # width * 1.5, rounded up to 64 columns
    bounded = KVBuffer(max_rows=4)
    bounded.add_rows(layer_kv(1, 1000, 1.0), [1000], columns_to_come=10)
    assert bounded.col_capacity == 1088  # at least one 64-column step of headroom
    bounded.width = bounded.col_capacity  # decoded up to the last column
    bounded.reserve_step(columns_to_come=200)
    assert bounded.col_capacity == 1344  # 1088 + 200, rounded up to 64 columns


def test_growing_moves_every_live_row_and_picks_rows_by_source_index():
    buffer = KVBuffer(max_rows=4)
    buffer.add_rows(layer_kv(1, 3, 1.0), [3], columns_to_come=1)
    prefilled = layer_kv(2, 5, 2.0)
    prefilled[0][0][1] += 100  # the second prefilled row differs
    buffer.add_rows(prefilled, [5, 5], source_rows=torch.tensor([1, 0]))  # wider than the buffer: it grows
    assert buffer.rows == 3 and buffer.width == 5
    keys, values = buffer.row_kv(0)
    assert keys[1].shape == (1, 3, 2) and float(keys[1].min()) == float(keys[1].max()) == 11.0
    assert float(values[0].max()) == 1.5
    assert float(buffer.row_kv(1)[0][0].max()) == 102.0 and float(buffer.row_kv(2)[0][0].max()) == 2.0
