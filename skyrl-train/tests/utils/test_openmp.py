"""`release_openmp_threads`: a thread whose compute phase ended hands its OpenMP worker threads back."""

import os
import threading

import torch

from skyrl_train.utils.openmp import loaded_openmp_runtime, release_openmp_threads


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def parallel_kernel() -> None:
    torch.ones(1 << 22).add_(1)  # 4M elements: far above torch's grain size, so it runs as an OpenMP parallel region


def test_the_runtime_torch_loaded_is_found_in_the_process_maps():
    parallel_kernel()
    runtime = loaded_openmp_runtime()
    assert runtime is not None and os.path.basename(runtime).startswith(("libgomp", "libiomp5", "libomp"))


def test_no_runtime_is_reported_for_maps_without_one_or_without_proc(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0000000000-7f0000001000 r-xp 00000000 00:10 42    /usr/lib/libc.so.6\n"
        "7f0000002000-7f0000003000 rw-p 00000000 00:00 0 \n"
    )
    assert loaded_openmp_runtime(maps) is None
    assert loaded_openmp_runtime(tmp_path / "missing") is None


def test_a_thread_that_ran_parallel_kernels_keeps_its_workers_until_it_releases_them():
    counts = {}

    def phase():
        torch.set_num_threads(2)
        counts["before"] = os_threads()
        parallel_kernel()
        counts["with_team"] = os_threads()
        counts["released"] = release_openmp_threads()
        counts["after"] = os_threads()
        parallel_kernel()  # the next parallel kernel starts a new team
        counts["again"] = os_threads()
        release_openmp_threads()

    thread = threading.Thread(target=phase)
    thread.start()
    thread.join()
    assert counts["released"]
    assert counts["with_team"] == counts["before"] + 1  # one worker beside the thread itself
    assert counts["after"] == counts["before"]
    assert counts["again"] == counts["with_team"]
