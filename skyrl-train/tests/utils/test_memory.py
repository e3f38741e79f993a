"""`PeakRSS`: the peak resident memory of each interval, read from the kernel's high-water mark; `mapped_zeros`;
`release_free_memory`."""

import numpy as np
import pytest
import torch

from skyrl_train.utils.memory import MAPPED_MIN_BYTES, PeakRSS, mapped_zeros, release_free_memory, rss_bytes

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.bool])
@pytest.mark.parametrize("shape", [(4, 3, 256, 64), (2, 3), (0, 5)])
def test_mapped_zeros_are_zeros_of_the_shape_and_dtype_asked_for(shape, dtype):
    tensor = mapped_zeros(shape, dtype)
    assert tensor.shape == shape and tensor.dtype == dtype and tensor.device.type == "cpu"
    assert not tensor.any()
    tensor.fill_(1)  # writable
    assert tensor.all() or tensor.numel() == 0


def test_a_view_keeps_a_mapped_tensor_alive():
    base = mapped_zeros((MAPPED_MIN_BYTES // 4, 4), torch.float32)
    base[7] = torch.arange(4.0)
    row = base[7]
    del base
    assert row.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_freed_mapped_blocks_go_back_to_the_kernel_while_small_tensors_between_them_live_on():
    torch.empty(16 * 2**20, dtype=torch.uint8)  # a freed 16 MiB block: glibc's mmap threshold may now be past 2 MiB
    blocks, survivors = [], []
    for _ in range(100):  # 200 MiB of long-lived 2 MiB blocks, each followed by a small tensor that stays
        blocks.append(mapped_zeros((512, 1024), torch.float32).fill_(1.0))
        survivors.append(torch.ones(1024))
    before, _ = rss_bytes()
    del blocks
    after, _ = rss_bytes()
    assert before - after > 190 * 2**20
    assert len(survivors) == 100
