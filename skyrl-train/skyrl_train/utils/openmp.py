"""Handing back a thread's OpenMP worker threads when its share of the compute is done.

Torch's CPU kernels run on OpenMP, and every thread that runs a parallel kernel gets its own team of worker threads,
kept for as long as that thread lives. In one process, generation (the hf engine's scheduler thread) and training
(the trainer's thread) are two such threads, so a machine with as many cores as torch threads ends up with more
OpenMP threads than cores. GNU OpenMP (libgomp) then stops busy-waiting at the end of each parallel region (its
"throttled" spin count of ~100 iterations) and its threads sleep on a futex after every kernel and are woken for the
next: on a 2-core VM that was ~40k context switches per thread in one policy update of the GRPO benchmark, which
took 15-24 s against 10-12 s with a single team; generation suffered the same way (learnings/cpu-step-profile.md).

The phases take turns (the trainer waits while the engine generates, the engine idles while the trainer trains), so
each thread releases its team when its phase ends (OpenMP 5.0 ``omp_pause_resource_all``); the other phase's team is
then the only one and waits at its barriers as usual. The next parallel kernel on a released thread starts a new
team (one thread start per worker). Nothing else changes: thread counts, kernels and their results are the same.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

OMP_PAUSE_SOFT = 1
"""``omp_pause_soft``: free the calling thread's threads and buffers; the runtime re-creates them when needed."""

_RUNTIME_NAMES = ("libgomp", "libiomp5", "libomp")
"""OpenMP runtimes torch builds link against (GNU, Intel, LLVM); OpenMP 5.0 gives each ``omp_pause_resource_all``
(checked here with GNU's)."""


def loaded_openmp_runtime(maps: Path = Path("/proc/self/maps")) -> str | None:
    """Path of the OpenMP runtime mapped into this process, or None (no /proc, or none loaded)."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(maxsplit=5)  # address, perms, offset, device, inode[, path]
        path = fields[5] if len(fields) == 6 else ""
        if os.path.basename(path).startswith(_RUNTIME_NAMES) and ".so" in path:
            return path
    return None


@functools.cache
def _pause_resource_all():
    """The loaded runtime's ``omp_pause_resource_all``, or None (logged once) where there is none to call. Looked up
    once: torch loads its runtime when it is imported, before any caller of this module runs a kernel."""
    runtime = loaded_openmp_runtime()
    pause = getattr(ctypes.CDLL(runtime), "omp_pause_resource_all", None) if runtime else None
    if pause is None:
        logger.info("no OpenMP runtime with omp_pause_resource_all is loaded: OpenMP threads are kept between phases")
        return None
    pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
    return pause


def release_openmp_threads() -> bool:
    """Release the OpenMP worker threads of the calling thread (call it on the thread whose phase ended, outside any
    parallel region). True if the runtime released them; False where no OpenMP runtime is loaded, it has no
    ``omp_pause_resource_all``, or it refused."""
    pause = _pause_resource_all()
    return pause is not None and pause(OMP_PAUSE_SOFT) == 0
