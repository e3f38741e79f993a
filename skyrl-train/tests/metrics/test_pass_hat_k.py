"""pass^k (tau-bench's consistency metric): C(c, k) / C(n, k) per prompt, averaged over prompts, per data source."""

from __future__ import annotations

import pytest

from skyrl_gym.common.outcomes import pass_hat_k
from skyrl_train.metrics.reward_metrics import pass_hat_k_metrics


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 2, 1, 2 / 4),
        (4, 2, 2, 1 / 6),  # C(2,2)=1 of C(4,2)=6 pairs are both solved
        (4, 2, 3, 0.0),
        (4, 3, 2, 3 / 6),
        (4, 3, 3, 1 / 4),
        (4, 4, 4, 1.0),
        (8, 0, 1, 0.0),
    ],
)
def test_pass_hat_k_of_one_prompt(n, c, k, expected):
    assert pass_hat_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, 2, 0), (4, 2, 5), (0, 0, 1)])
def test_pass_hat_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_hat_k needs"):
        pass_hat_k(n, c, k)


def test_pass_hat_k_metrics_average_over_prompts_and_split_by_data_source():
    # retail task a: 2 of 4 solved, retail task b: 3 of 4; airline task c: 1 of 2
    solved = [True, False, True, False] + [True, True, True, False] + [True, False]
    uids = ["a"] * 4 + ["b"] * 4 + ["c"] * 2
    sources = ["tau_bench/retail"] * 8 + ["tau_bench/airline"] * 2
    metrics = pass_hat_k_metrics(solved, uids, sources)
    assert metrics == pytest.approx(
        {
            # overall: the smallest prompt has 2 trials, so k = 1, 2
            "pass_hat_1": (2 / 4 + 3 / 4 + 1 / 2) / 3,
            "pass_hat_2": (1 / 6 + 3 / 6 + 0) / 3,
            "tau_bench_airline/pass_hat_1": 0.5,
            "tau_bench_airline/pass_hat_2": 0.0,
            "tau_bench_retail/pass_hat_1": (0.5 + 0.75) / 2,
            "tau_bench_retail/pass_hat_2": (1 / 6 + 1 / 2) / 2,
            "tau_bench_retail/pass_hat_3": (0 + 1 / 4) / 2,
            "tau_bench_retail/pass_hat_4": 0.0,
        }
    )
    assert pass_hat_k_metrics([], []) == {}
