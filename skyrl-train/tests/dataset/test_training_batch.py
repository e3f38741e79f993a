"""TrainingInputBatch: equal batch sizes enforced, row operations, device/dtype, save/load and pickling."""

from __future__ import annotations

import pickle

import pytest
import torch

from skyrl_train.training_batch import TrainingInputBatch


def _batch() -> TrainingInputBatch:
    """Three rows: sequences [[10, 11], [20, 21], [30, 31]] (long), rewards [[0, 1], [0, 2], [0, 3]] (float)."""
    return TrainingInputBatch(
        {
            "sequences": torch.tensor([[10, 11], [20, 21], [30, 31]]),
            "rewards": torch.tensor([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]]),
            "rollout_logprobs": None,
        },
        metadata={"uids": ["a", "b", "c"], "response_length": 2},
    )


def _rows(batch: TrainingInputBatch) -> list[list[int]]:
    return batch["sequences"].tolist()


def test_batch_size_is_the_shared_first_dimension():
    assert _batch().batch_size == 3


def test_constructing_with_mismatched_batch_sizes_names_the_key():
    with pytest.raises(
        ValueError, match="'loss_mask' has batch size 2, but the batch has 3 rows \\(from 'sequences'\\)"
    ):
        TrainingInputBatch({"sequences": torch.zeros(3, 4), "loss_mask": torch.zeros(2, 4)})


def test_setting_a_tensor_of_another_batch_size_names_the_key():
    batch = _batch()
    with pytest.raises(ValueError, match="'advantages' has batch size 4"):
        batch["advantages"] = torch.zeros(4, 2)


def test_update_checks_batch_size_too():
    batch = _batch()
    with pytest.raises(ValueError, match="'values' has batch size 1"):
        batch.update({"values": torch.zeros(1, 2)})


def test_non_tensor_values_are_refused():
    with pytest.raises(TypeError, match="'uids': expected a torch.Tensor or None, got list"):
        TrainingInputBatch({"uids": ["a"]})


def test_zero_dim_tensor_is_refused():
    with pytest.raises(ValueError, match="'loss': a 0-dim tensor has no batch dimension"):
        TrainingInputBatch({"loss": torch.tensor(1.0)})


def test_select_keeps_only_the_given_keys_and_the_metadata():
    selected = _batch().select(["rewards"])
    assert list(selected) == ["rewards"]
    assert selected.metadata == {"uids": ["a", "b", "c"], "response_length": 2}


def test_select_can_narrow_the_metadata():
    assert _batch().select(["sequences"], metadata_keys=["response_length"]).metadata == {"response_length": 2}


def test_select_of_a_missing_key_names_it():
    with pytest.raises(KeyError, match="no key\\(s\\) \\['values'\\]"):
        _batch().select(["sequences", "values"])


def test_slice_by_range_of_rows():
    assert _rows(_batch()[1:3]) == [[20, 21], [30, 31]]


def test_integer_index_gives_a_one_row_batch():
    assert _rows(_batch()[-1]) == [[30, 31]]


def test_integer_index_past_the_end_raises():
    with pytest.raises(IndexError):
        _batch()[3]


def test_list_of_indices_gathers_rows():
    assert _rows(_batch()[[2, 0]]) == [[30, 31], [10, 11]]


def test_boolean_mask_selects_rows():
    assert _rows(_batch()[torch.tensor([True, False, True])]) == [[10, 11], [30, 31]]


def test_none_values_stay_none_through_row_operations():
    assert _batch()[0:2]["rollout_logprobs"] is None


def test_slice_metadata_is_a_copy():
    batch = _batch()
    part = batch[0:1]
    part.metadata["global_step"] = 5
    assert "global_step" not in batch.metadata


def test_chunk_splits_into_consecutive_pieces_of_chunk_size():
    assert [_rows(c) for c in _batch().chunk(2)] == [[[10, 11], [20, 21]], [[30, 31]]]


def test_cat_joins_rows_in_order_with_the_first_metadata():
    batch = _batch()
    joined = TrainingInputBatch.cat([batch[2:3], batch[0:2]])
    assert _rows(joined) == [[30, 31], [10, 11], [20, 21]]
    assert joined["rewards"].tolist() == [[0.0, 3.0], [0.0, 1.0], [0.0, 2.0]]
    assert joined["rollout_logprobs"] is None
    assert joined.metadata == batch.metadata


def test_cat_of_batches_with_different_keys_raises():
    with pytest.raises(ValueError, match="batch 1 has keys \\['sequences'\\], batch 0 has"):
        TrainingInputBatch.cat([_batch(), _batch().select(["sequences"])])


def test_cat_of_a_key_none_in_one_batch_only_names_it():
    other = _batch()
    other["rollout_logprobs"] = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="'rollout_logprobs' is None in some batches"):
        TrainingInputBatch.cat([_batch(), other])


def test_repeat_tiles_the_whole_batch():
    assert _rows(_batch()[0:2].repeat(2)) == [[10, 11], [20, 21], [10, 11], [20, 21]]


def test_repeat_interleave_repeats_each_row_in_place():
    assert _rows(_batch()[0:2].repeat_interleave(2)) == [[10, 11], [10, 11], [20, 21], [20, 21]]


def test_to_dtype_converts_floating_tensors_only():
    moved = _batch().to("cpu", dtype=torch.float64)
    assert (moved["sequences"].dtype, moved["rewards"].dtype) == (torch.int64, torch.float64)


def test_save_and_load_round_trip(tmp_path):
    _batch().save(tmp_path / "batch.pt")
    loaded = TrainingInputBatch.load(tmp_path / "batch.pt")
    assert _rows(loaded) == [[10, 11], [20, 21], [30, 31]]
    assert loaded["rewards"].tolist() == [[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]]
    assert loaded["rollout_logprobs"] is None
    assert loaded.metadata == {"uids": ["a", "b", "c"], "response_length": 2}


def test_pickle_round_trip():
    loaded = pickle.loads(pickle.dumps(_batch()))
    assert isinstance(loaded, TrainingInputBatch)
    assert _rows(loaded) == [[10, 11], [20, 21], [30, 31]]
    assert loaded.metadata == {"uids": ["a", "b", "c"], "response_length": 2}
