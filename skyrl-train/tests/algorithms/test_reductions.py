"""Loss reductions, and the micro-batch property: the micro-batch losses, each normalised by the mini-batch's
normaliser, sum to the loss of the whole mini-batch.

Mini-batch used throughout (4 sequences x 3 tokens):

    loss  [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]
    mask  [[1, 1, 1], [1, 0, 0], [1, 1, 0], [ 0,  1,  1]]
    masked row sums  6, 4, 15, 23   (total 48 over 8 tokens)
    masked row means 2, 4, 7.5, 11.5

Micro-batches: rows [0] and rows [1, 2, 3] (3 and 5 valid tokens), so a per-micro-batch mean would be biased.
"""

import pytest
import torch
from torch.testing import assert_close

from skyrl_train.utils.ppo_utils import LossReduction, compute_loss_normalizer, reduce_loss

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [10.0, 11.0, 12.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
MAX_SEQ_LEN = 4
MICRO = [slice(0, 1), slice(1, 4)]


def _accumulated(reduction: str) -> torch.Tensor:
    z = compute_loss_normalizer(MASK, reduction, max_seq_len=MAX_SEQ_LEN)
    return sum(reduce_loss(LOSS[s], MASK[s], reduction, normalizer=z) for s in MICRO)


def test_token_mean_is_masked_sum_over_valid_tokens():
    assert reduce_loss(LOSS, MASK, "token_mean").item() == pytest.approx(48 / 8)


def test_sequence_mean_is_mean_of_per_sequence_token_means():
    assert reduce_loss(LOSS, MASK, "sequence_mean").item() == pytest.approx((2 + 4 + 7.5 + 11.5) / 4)


def test_seq_mean_token_sum_norm_divides_token_sums_by_max_seq_len():
    # (6/4 + 4/4 + 15/4 + 23/4) / 4 = 3.0
    value = reduce_loss(LOSS, MASK, "seq_mean_token_sum_norm", max_seq_len=MAX_SEQ_LEN).item()
    assert value == pytest.approx(3.0)


def test_token_mean_accumulated_over_micro_batches_equals_full_batch():
    # 6/8 + 42/8 = 6.0; a mean of micro-batch means would give (6/3 + 42/5) / 2 = 5.2.
    assert _accumulated("token_mean").item() == pytest.approx(6.0)


def test_sequence_mean_accumulated_over_micro_batches_equals_full_batch():
    # 2/4 + (4 + 7.5 + 11.5)/4 = 6.25; a mean of micro-batch means would give (2 + 23/3) / 2 = 4.833.
    assert _accumulated("sequence_mean").item() == pytest.approx(6.25)


def test_seq_mean_token_sum_norm_accumulated_over_micro_batches_equals_full_batch():
    # Z = 4 sequences * max_seq_len 4 = 16: 6/16 + 42/16 = 3.0.
    assert _accumulated("seq_mean_token_sum_norm").item() == pytest.approx(3.0)


def test_per_micro_batch_normalisation_is_the_biased_mean_of_means():
    naive = sum(reduce_loss(LOSS[s], MASK[s], "token_mean") for s in MICRO) / len(MICRO)
    assert naive.item() == pytest.approx(5.2)


@pytest.mark.parametrize("reduction", [r.value for r in LossReduction])
def test_accumulated_gradients_equal_full_batch_gradients(reduction):
    full = LOSS.clone().requires_grad_(True)
    reduce_loss(full, MASK, reduction, max_seq_len=MAX_SEQ_LEN).backward()

    parts = LOSS.clone().requires_grad_(True)
    z = compute_loss_normalizer(MASK, reduction, max_seq_len=MAX_SEQ_LEN)
    for s in MICRO:
        reduce_loss(parts[s], MASK[s], reduction, normalizer=z).backward()
    assert_close(parts.grad, full.grad)


def test_normalizer_from_micro_batch_masks_of_different_lengths():
    # The worker may pad micro-batches to different lengths; the normaliser is computed from the list.
    micro_masks = [torch.tensor([[1.0, 1.0, 1.0, 0.0]]), torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])]
    assert compute_loss_normalizer(micro_masks, "token_mean") == 8.0
    assert compute_loss_normalizer(micro_masks, "sequence_mean") == 4.0
    assert compute_loss_normalizer(micro_masks, "seq_mean_token_sum_norm", max_seq_len=4) == 16.0


def test_sequences_without_loss_tokens_do_not_count_as_sequences():
    mask = MASK.clone()
    mask[1] = 0.0  # e.g. a padding row or an excluded sample
    # Rows 0, 2, 3 remain: (2 + 7.5 + 11.5) / 3 = 7.0
    assert reduce_loss(LOSS, mask, "sequence_mean").item() == pytest.approx(7.0)


def test_empty_mask_gives_zero_loss_not_nan():
    assert reduce_loss(LOSS, torch.zeros_like(MASK), "token_mean").item() == 0.0


def test_seq_mean_token_sum_norm_requires_max_seq_len():
    with pytest.raises(ValueError, match="max_seq_len"):
        compute_loss_normalizer(MASK, "seq_mean_token_sum_norm")


def test_unknown_reduction_lists_the_available_ones():
    with pytest.raises(ValueError, match="token_mean, sequence_mean, seq_mean_token_sum_norm"):
        reduce_loss(LOSS, MASK, "prompt_mean")
