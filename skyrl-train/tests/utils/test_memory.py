"""`PeakRSS`: the peak resident memory of each interval, read from the kernel's high-water mark."""

import numpy as np

from skyrl_train.utils.memory import PeakRSS, release_free_memory, rss_bytes

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


def test_release_free_memory_returns_the_free_holes_another_thread_left_in_its_arena():
    import threading

    kept = []

    def allocate_then_free_every_other_block():
        blocks = [np.ones(100 * 1024 // 8) for _ in range(2000)]  # 200 MiB in 100 KiB blocks (below mmap size)
        kept.extend(blocks[::2])  # the survivors pin the arena, so freeing the rest leaves holes
        del blocks

    thread = threading.Thread(target=allocate_then_free_every_other_block)
    thread.start()
    thread.join()
    before, _ = rss_bytes()
    assert release_free_memory()
    after, _ = rss_bytes()
    assert before - after > 80 * MB  # ~100 MiB of holes went back to the OS
    assert len(kept) == 1000
