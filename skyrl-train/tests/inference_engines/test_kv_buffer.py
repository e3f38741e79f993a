"""Rows leaving the running batch: each gap below the new row count is filled by one survivor from above it."""

from __future__ import annotations

from skyrl_train.inference_engines.kv_buffer import compaction_plan


def test_compaction_moves_only_survivors_from_above_the_new_row_count():
    holes, sources, rows = compaction_plan(6, [1, 4])
    assert (holes.tolist(), sources.tolist(), rows) == ([1], [5], 4)


def test_removing_the_last_rows_moves_nothing():
    holes, sources, rows = compaction_plan(5, [3, 4])
    assert (holes.tolist(), sources.tolist(), rows) == ([], [], 3)


def test_removing_every_row_leaves_an_empty_batch():
    holes, sources, rows = compaction_plan(3, [0, 1, 2])
    assert (holes.tolist(), sources.tolist(), rows) == ([], [], 0)
