"""`PeakRSS`: the peak resident memory of each interval, read from the kernel's high-water mark."""

import numpy as np

from skyrl_train.utils.memory import PeakRSS, rss_bytes

MB = 1e6


def test_a_step_that_touched_200_mb_reports_a_peak_200_mb_above_its_end_and_the_next_step_does_not():
    memory = PeakRSS()
    memory.start()
    block = np.ones(200 * 1024 * 1024 // 8)  # 200 MiB touched, then freed before the interval ends
    del block
    first = memory.metrics()
    second = memory.metrics()
    assert first["memory/peak_rss_gb"] - first["memory/rss_gb"] >= 200 * 1024 * 1024 / 1e9 * 0.95
    assert second["memory/peak_rss_gb"] - second["memory/rss_gb"] < 50 * MB / 1e9


def test_rss_is_at_most_the_high_water_mark():
    rss, peak = rss_bytes()
    assert 0 < rss <= peak
