"""`PeakRSS`: the peak resident memory of each interval, read from the kernel's high-water mark; giving freed memory
back to the OS (`release_free_memory`, `pin_mmap_threshold`)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from skyrl_train.utils.memory import PeakRSS, pin_mmap_threshold, release_free_memory, rss_bytes

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


_FREE_EVERY_OTHER_LARGE_BLOCK = textwrap.dedent("""
    import sys
    import numpy as np
    from skyrl_train.utils.memory import pin_mmap_threshold, rss_bytes

    if sys.argv[1] == "pinned":
        assert pin_mmap_threshold()
    np.ones(8 * 2**20 // 8)  # an 8 MiB block freed at once: glibc's own threshold rises to 8 MiB
    kept, freed = [], []
    for i in range(100):
        (kept if i % 2 else freed).append(np.ones(3 * 2**19 // 8))  # 1.5 MiB blocks, interleaved
    before = rss_bytes()[0]
    del freed
    print(before - rss_bytes()[0])
    """)


@pytest.mark.parametrize("threshold", ["pinned", "glibc"])
def test_a_pinned_mmap_threshold_gives_freed_large_blocks_back_without_a_trim(threshold):
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    result = subprocess.run(
        [sys.executable, "-c", _FREE_EVERY_OTHER_LARGE_BLOCK, threshold], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    returned = int(result.stdout)
    if threshold == "pinned":
        assert returned > 70 * MB  # the 50 freed blocks (~79 MB) went back to the OS
    else:
        assert returned < 10 * MB  # glibc's raised threshold put them in the heap, between the kept ones


def test_a_mmap_threshold_from_the_environment_is_left_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert not pin_mmap_threshold()
