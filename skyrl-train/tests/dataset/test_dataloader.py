"""PromptDataLoader: deterministic order, per-epoch reshuffle, exact resume from state_dict.

The dataset is the integers 0..9 collated into plain lists, so batches are the row indices. The shuffled orders
are torch.randperm(10) under torch.Generator().manual_seed(seed + epoch):
    seed 42 (epoch 0): [2, 6, 1, 8, 4, 5, 0, 9, 3, 7]
    seed 43 (epoch 1): [8, 4, 9, 0, 5, 1, 6, 7, 2, 3]
    seed 44 (epoch 2): [2, 6, 3, 8, 7, 9, 1, 4, 5, 0]
"""

from __future__ import annotations

import pytest
import torch

from skyrl_train.dataset import PromptDataLoader, PromptDataset

ROWS = list(range(10))
EPOCH_0 = [[2, 6, 1], [8, 4, 5], [0, 9, 3]]
EPOCH_1 = [[8, 4, 9], [0, 5, 1], [6, 7, 2]]
EPOCH_2 = [[2, 6, 3], [8, 7, 9], [1, 4, 5]]


def _loader(**kwargs) -> PromptDataLoader:
    return PromptDataLoader(ROWS, batch_size=3, collate_fn=list, **kwargs)


def _take(iterator, n: int) -> list:
    return [next(iterator) for _ in range(n)]


def test_len_is_full_batches_per_epoch_with_drop_last():
    assert len(_loader()) == 3


def test_len_counts_the_partial_batch_without_drop_last():
    assert len(_loader(drop_last=False)) == 4


def test_first_epoch_order_with_default_seed():
    assert list(_loader()) == EPOCH_0


def test_drop_last_leaves_out_the_rows_past_the_last_full_batch():
    assert sorted(row for batch in _loader() for row in batch) == [0, 1, 2, 3, 4, 5, 6, 8, 9]


def test_without_drop_last_the_last_batch_is_partial():
    assert list(_loader(drop_last=False)) == [*EPOCH_0, [7]]


def test_each_epoch_is_reshuffled_from_seed_plus_epoch():
    loader = _loader()
    assert [list(loader), list(loader), list(loader)] == [EPOCH_0, EPOCH_1, EPOCH_2]


def test_a_different_seed_gives_a_different_order():
    assert list(_loader(seed=7)) == [[5, 0, 3], [4, 1, 7], [9, 6, 8]]


def test_eval_loader_keeps_dataset_order_and_the_partial_batch():
    assert list(PromptDataLoader.for_eval(ROWS, batch_size=3, collate_fn=list)) == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7, 8],
        [9],
    ]


def test_breaking_out_and_iterating_again_continues_the_epoch():
    loader = _loader()
    for _ in loader:
        break
    assert list(loader) == EPOCH_0[1:]


def test_state_after_one_batch_points_at_the_second():
    loader = _loader()
    _take(iter(loader), 1)
    assert loader.state_dict() == {
        "epoch": 0,
        "position": 1,
        "dataset_size": 10,
        "batch_size": 3,
        "shuffle": True,
        "drop_last": True,
        "seed": 42,
        "grouped": False,
    }


def test_state_after_the_last_batch_of_an_epoch_is_the_next_epoch_start():
    loader = _loader()
    _take(iter(loader), 3)
    assert (loader.state_dict()["epoch"], loader.state_dict()["position"]) == (1, 0)


def test_resume_mid_epoch_yields_the_remaining_batches_then_the_same_next_epochs(tmp_path):
    original = _loader()
    _take(iter(original), 1)
    torch.save(original.state_dict(), tmp_path / "data.pt")

    resumed = _loader()
    resumed.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=True))
    assert [list(resumed), list(resumed)] == [EPOCH_0[1:], EPOCH_1]


def test_resume_at_an_epoch_boundary_starts_the_next_epoch():
    original = _loader()
    list(original)
    resumed = _loader()
    resumed.load_state_dict(original.state_dict())
    assert list(resumed) == EPOCH_1


def test_resume_mid_second_epoch_then_crosses_into_the_third():
    original = _loader()
    list(original)
    _take(iter(original), 2)
    resumed = _loader()
    resumed.load_state_dict(original.state_dict())
    assert [list(resumed), list(resumed)] == [EPOCH_1[2:], EPOCH_2]


def test_loading_state_saved_with_another_batch_size_names_the_setting():
    state = _loader().state_dict()
    loader = PromptDataLoader(ROWS, batch_size=2, collate_fn=list)
    with pytest.raises(ValueError, match="saved with batch_size=3, but this loader has batch_size=2"):
        loader.load_state_dict(state)


def test_loading_state_for_a_different_dataset_size_is_refused():
    state = _loader().state_dict()
    loader = PromptDataLoader(list(range(12)), batch_size=3, collate_fn=list)
    with pytest.raises(ValueError, match="saved with dataset_size=10, but this loader has dataset_size=12"):
        loader.load_state_dict(state)


def test_batches_of_a_prompt_dataset_are_collated_dicts(files):
    path = files.jsonl("d.jsonl", [files.row(f"q{i}", env_class="gsm8k") for i in range(4)])
    dataset = PromptDataset([path], tokenizer=None, max_prompt_length=None)
    batches = list(PromptDataLoader.for_eval(dataset, batch_size=3))
    assert batches[1] == {
        "prompt": [[{"role": "user", "content": "q3"}]],
        "env_class": ["gsm8k"],
        "env_extras": [{}],
        "uid": ["3"],
    }


GROUPS = ["a", "b", "c"] * 4  # row i is in group "abc"[i % 3]


def test_grouped_batches_hold_one_row_of_each_group():
    loader = PromptDataLoader(list(range(12)), batch_size=3, collate_fn=list, groups=GROUPS)
    first, second = list(loader), list(loader)
    assert first == [[2, 7, 6], [4, 9, 11], [0, 8, 10], [1, 5, 3]]
    assert second == [[4, 2, 0], [7, 3, 5], [1, 11, 9], [10, 8, 6]]
    assert all(sorted(GROUPS[row] for row in batch) == ["a", "b", "c"] for batch in first + second)


def test_grouped_epoch_visits_every_row_once_and_puts_a_larger_group_s_surplus_last():
    groups = ["a"] * 6 + ["b"] * 3 + ["c"] * 3
    batches = list(PromptDataLoader(list(range(12)), batch_size=3, collate_fn=list, groups=groups))
    assert sorted(row for batch in batches for row in batch) == list(range(12))
    assert [sorted(groups[row] for row in batch) for batch in batches] == [["a", "b", "c"]] * 3 + [["a", "a", "a"]]


def test_groups_must_label_every_row():
    with pytest.raises(ValueError, match="groups has 2 labels for a dataset of 10 rows"):
        _loader(groups=["a", "b"])


def test_state_saved_without_groups_does_not_resume_a_grouped_loader():
    state = _loader().state_dict()
    loader = _loader(groups=["a", "b"] * 5)
    with pytest.raises(ValueError, match="saved with grouped=False, but this loader has grouped=True"):
        loader.load_state_dict(state)


def test_a_prompt_dataset_column_labels_the_rows_and_a_missing_one_is_named(files):
    rows = [files.row(f"q{i}", env_class="gsm8k", data_source=f"s{i % 2}") for i in range(4)]
    dataset = PromptDataset([files.jsonl("d.jsonl", rows)], tokenizer=None, max_prompt_length=None)
    assert dataset.column("data_source") == ["s0", "s1", "s0", "s1"]
    with pytest.raises(ValueError, match=r"d.jsonl: row 0 has no column 'template'"):
        dataset.column("template")
