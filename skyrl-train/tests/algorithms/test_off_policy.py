"""Off-policy correction (``skyrl_train.algorithms.off_policy``): every rule against values computed by hand.

One batch of importance ratios ``is = exp(old − rollout)`` serves every test (``X`` marks a token outside the loss
mask: its ratio of 100 must never count)::

    row 0: 1.5   0.5   3.0    mask 1 1 1    product 2.25, geometric mean 2.25^(1/3) = 1.3104
    row 1: 1.0   4.0   X      mask 1 1 0    product 4.0,  geometric mean 2.0
    row 2: 1.25  X     0.8    mask 1 0 1    product 1.0,  geometric mean 1.0
    row 3: X     X     X      mask 0 0 0    (no loss token: not a row of the statistics)

Loss tokens: 1.5, 0.5, 3.0, 1.0, 4.0, 1.25, 0.8 (7 tokens, 3 rows).
"""

from __future__ import annotations

import math

import pytest
import torch

from skyrl_train.algorithms.off_policy import correction_factor
from skyrl_train.config.schema import OffPolicyCorrectionConfig
from skyrl_train.workers.metrics import combine_micro_metrics

X = 100.0
RATIOS = torch.tensor([[1.5, 0.5, 3.0], [1.0, 4.0, X], [1.25, X, 0.8], [X, X, X]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 1], [0, 0, 0]], dtype=torch.float64)
ROLLOUT = torch.full(RATIOS.shape, -2.0, dtype=torch.float64)
OLD = ROLLOUT + RATIOS.log()

# Over the 7 loss tokens: mean 12.05 / 7; population std from E[(r − 1)²] = 13.6025 / 7.
IS_RATIO = {
    "is_ratio_mean": 12.05 / 7,
    "is_ratio_std": math.sqrt(13.6025 / 7 - (12.05 / 7 - 1) ** 2),
    "is_ratio_min": 0.5,
    "is_ratio_max": 4.0,
}
ONES = [1.0, 1.0, 1.0]


def correct(**config):
    result = correction_factor(OLD, ROLLOUT, MASK, OffPolicyCorrectionConfig(**config))
    return result.factor, result.stats.summary()


def assert_metrics(actual: dict[str, float], expected: dict[str, float]) -> None:
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        assert actual[key] == pytest.approx(value, abs=1e-12), key


def assert_factor(actual: torch.Tensor, expected: list[list[float]]) -> None:
    """Compared on loss tokens only: elsewhere the loss is 0 whatever the factor."""
    expected = torch.tensor(expected, dtype=torch.float64)
    torch.testing.assert_close(actual * MASK, expected * MASK, atol=1e-12, rtol=0)


def test_token_tis_caps_each_token_ratio_and_counts_the_tokens_above_the_cap():
    factor, metrics = correct(tis_ratio_type="token", token_tis_ratio_clip_high=2.0)
    assert_factor(factor, [[1.5, 0.5, 2.0], [1.0, 2.0, 1.0], [1.25, 1.0, 0.8], ONES])
    assert_metrics(metrics, {**IS_RATIO, "tis_token_clip_high_ratio": 2 / 7})  # 3.0 and 4.0


def test_sequence_tis_weights_every_token_of_a_row_by_its_capped_product():
    factor, metrics = correct(tis_ratio_type="sequence", sequence_tis_ratio_clip_high=2.5)
    assert_factor(factor, [[2.25] * 3, [2.5] * 3, ONES, ONES])
    assert_metrics(metrics, {**IS_RATIO, "tis_seq_clip_high_ratio": 1 / 3})  # row 1 (4.0 > 2.5)


def test_the_geometric_mask_drops_rows_whose_mean_log_ratio_is_out_of_bounds():
    factor, metrics = correct(sequence_mask_metric="geometric", geo_mask_low=1.1, geo_mask_high=1.5)
    assert_factor(factor, [ONES, [0, 0, 0], [0, 0, 0], ONES])  # 2.0 above, 1.0 below
    assert_metrics(
        metrics,
        {
            **IS_RATIO,
            "geo_sequence_mask_masked_ratio": 2 / 3,
            "geo_sequence_mask_over_high_ratio": 1 / 3,
            "geo_sequence_mask_under_low_ratio": 1 / 3,
        },
    )


def test_the_product_mask_drops_rows_whose_ratio_product_is_out_of_bounds():
    factor, metrics = correct(sequence_mask_metric="product", product_mask_low=0.5, product_mask_high=3.0)
    assert_factor(factor, [ONES, [0, 0, 0], ONES, ONES])  # 4.0 above
    assert_metrics(
        metrics,
        {
            **IS_RATIO,
            "product_sequence_mask_masked_ratio": 1 / 3,
            "product_sequence_mask_over_high_ratio": 1 / 3,
            "product_sequence_mask_under_low_ratio": 0.0,
        },
    )


@pytest.mark.parametrize(
    ("low", "high", "kept", "over", "under"),
    [
        (0.6, 3.5, [False, False, True], 1 / 3, 1 / 3),  # row 0 has 0.5 < 0.6, row 1 has 4.0 > 3.5
        (0.6, None, [False, True, True], 0.0, 1 / 3),
        (None, 3.5, [True, False, True], 1 / 3, 0.0),
    ],
    ids=["both", "low-only", "high-only"],
)
def test_the_outlier_mask_drops_rows_with_any_loss_token_out_of_bounds(low, high, kept, over, under):
    factor, metrics = correct(outlier_token_is_threshold_low=low, outlier_token_is_threshold_high=high)
    # the ratio-100 tokens outside the loss mask of rows 1 and 2 do not make them outliers
    assert_factor(factor, [ONES if keep else [0, 0, 0] for keep in kept] + [ONES])
    masked = kept.count(False) / 3
    expected = {
        "outlier_seq_masked_ratio": masked,
        "outlier_seq_over_high_ratio": over,
        "outlier_seq_under_low_ratio": under,
    }
    assert_metrics(metrics, {**IS_RATIO, **expected})


def test_outlier_mask_token_tis_and_geometric_mask_combine_and_each_reports_on_its_own():
    factor, metrics = correct(
        outlier_token_is_threshold_high=3.5,
        tis_ratio_type="token",
        token_tis_ratio_clip_high=2.0,
        sequence_mask_metric="geometric",
        geo_mask_low=0.9,
        geo_mask_high=1.5,
    )
    # row 1 is dropped by both masks; rows 0 and 2 keep their token TIS weights
    assert_factor(factor, [[1.5, 0.5, 2.0], [0, 0, 0], [1.25, 1.0, 0.8], ONES])
    assert_metrics(
        metrics,
        {
            **IS_RATIO,
            "outlier_seq_masked_ratio": 1 / 3,
            "outlier_seq_over_high_ratio": 1 / 3,
            "outlier_seq_under_low_ratio": 0.0,
            "tis_token_clip_high_ratio": 2 / 7,  # row 1's 4.0 still counts: each rule is reported on its own
            "geo_sequence_mask_masked_ratio": 1 / 3,
            "geo_sequence_mask_over_high_ratio": 1 / 3,
            "geo_sequence_mask_under_low_ratio": 0.0,
        },
    )


def test_sequence_tis_and_product_mask_combine():
    factor, metrics = correct(
        tis_ratio_type="sequence",
        sequence_tis_ratio_clip_high=2.0,
        sequence_mask_metric="product",
        product_mask_low=0.5,
        product_mask_high=3.0,
    )
    assert_factor(factor, [[2.0] * 3, [0, 0, 0], ONES, ONES])
    assert metrics["tis_seq_clip_high_ratio"] == pytest.approx(2 / 3)  # 2.25 and 4.0 above 2.0
    assert metrics["product_sequence_mask_masked_ratio"] == pytest.approx(1 / 3)


def test_bounds_are_inclusive_and_a_ratio_equal_to_the_cap_is_not_counted_as_capped():
    old = torch.zeros(2, 3, dtype=torch.float64)  # every ratio exactly 1
    config = OffPolicyCorrectionConfig(
        tis_ratio_type="token",
        token_tis_ratio_clip_high=1.0,
        sequence_mask_metric="geometric",
        geo_mask_low=1.0,
        geo_mask_high=1.0,
        outlier_token_is_threshold_low=1.0,
        outlier_token_is_threshold_high=1.0,
    )
    result = correction_factor(old, old.clone(), torch.ones_like(old), config)
    torch.testing.assert_close(result.factor, torch.ones_like(old), atol=0, rtol=0)
    metrics = result.stats.summary()
    assert metrics["is_ratio_mean"] == metrics["is_ratio_max"] == 1.0 and metrics["is_ratio_std"] == 0.0
    flagged = [key for key in metrics if key.endswith("_ratio") and not key.startswith("is_ratio")]
    assert len(flagged) == 7 and all(metrics[key] == 0.0 for key in flagged)


def test_without_any_rule_the_factor_is_one_and_only_the_ratio_statistics_are_reported():
    factor, metrics = correct()
    assert_factor(factor, [ONES] * 4)
    assert_metrics(metrics, IS_RATIO)


def test_a_batch_without_loss_tokens_reports_no_extremes_and_zero_fractions():
    empty = torch.zeros(2, 3)
    result = correction_factor(empty, empty - 1.0, empty, OffPolicyCorrectionConfig(sequence_mask_metric="product"))
    assert result.stats.summary() == {
        "is_ratio_mean": 0.0,  # the mean of nothing is 0, as in masked_mean; never NaN
        "is_ratio_std": 0.0,
        "product_sequence_mask_masked_ratio": 0.0,
        "product_sequence_mask_over_high_ratio": 0.0,
        "product_sequence_mask_under_low_ratio": 0.0,
    }


def test_shares_of_two_halves_add_up_to_the_whole_batch():
    config = OffPolicyCorrectionConfig(tis_ratio_type="token", sequence_mask_metric="product")
    whole = correction_factor(OLD, ROLLOUT, MASK, config).stats
    halves = [correction_factor(OLD[s], ROLLOUT[s], MASK[s], config).stats for s in (slice(0, 2), slice(2, 4))]
    combined: dict[str, float] = {}
    for stats in halves:  # as the policy worker folds micro-batches and ranks together
        combine_micro_metrics(combined, stats.shares(whole.num_tokens, whole.num_rows))
    expected = whole.shares(whole.num_tokens, whole.num_rows)
    assert combined.keys() == expected.keys()
    for key, value in expected.items():
        assert combined[key] == pytest.approx(value, abs=1e-12), key


@pytest.mark.parametrize(
    ("key", "value"), [("tis_ratio_type", "tokens"), ("sequence_mask_metric", "arithmetic")], ids=["tis", "mask"]
)
def test_an_unknown_rule_name_is_an_error(key, value):
    with pytest.raises(ValueError, match=f"Unknown off_policy_correction.{key} '{value}'"):
        correct(**{key: value})
