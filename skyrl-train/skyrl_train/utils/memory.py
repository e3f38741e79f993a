"""Resident memory of this process: the per-step memory metrics (Linux: read from /proc), and giving freed memory back.

`PeakRSS` measures the peak resident set size of each step: the kernel keeps a high-water mark of the process's RSS
(``VmHWM``), and writing ``5`` to ``/proc/self/clear_refs`` sets it back to the current RSS, so reading the mark at
the end of a step and resetting it gives the step's own peak, spikes between samples included.

`mapped_zeros` is for long-lived CPU buffers (the hf engine's KV): each gets an anonymous memory mapping of its own,
which freeing it unmaps. glibc serves a large block from the malloc arenas once its moving mmap threshold has grown past
it (up to 32 MiB, after the first large frees); a long-lived block there pins the pages around it after the transient
blocks between them are freed, so the process's resident memory grows. Fixing the threshold low
(`MALLOC_MMAP_THRESHOLD_`) avoids that for every block, but then every transient block above it (activations, logits)
is a fresh mapping whose pages fault in on each use: the main job's eval took ~11% longer with it
(docs/journal/cpu-step-profile.md).

`release_free_memory` matters because generation and training run on different threads: glibc's malloc gives each
thread its own arena and keeps freed blocks in it, so the memory the engine's thread freed (prefix cache, KV buffers,
logits) stays resident while the training thread allocates its activations elsewhere, and the two phases' peaks add
up. ``malloc_trim(0)`` hands every arena's free pages back to the kernel between the phases. On a GPU the same holds
for PyTorch's CUDA caching allocator, which keeps freed blocks for reuse: ``torch.cuda.empty_cache()`` returns the
unused ones to the driver, so that the next phase (or another process on the GPU) can have them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import math
import mmap
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

GB = 1e9
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


MAPPED_MIN_BYTES = 128 * 1024
"""glibc's initial mmap threshold: `mapped_zeros` leaves smaller tensors to the malloc arenas."""


def mapped_zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """Zeros of ``shape`` on ``device``; on the CPU, from `MAPPED_MIN_BYTES` on, in an anonymous memory mapping of
    their own, returned to the kernel when the tensor (and every view of it) is freed, whatever glibc's mmap
    threshold. The pages are zero until written, so an unused part costs no memory."""
    device = torch.device(device)
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if device.type != "cpu" or nbytes < MAPPED_MIN_BYTES:
        return torch.zeros(shape, dtype=dtype, device=device)
    return torch.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype, count=count).view(shape)


def rss_bytes() -> tuple[int, int]:
    """(current RSS, RSS high-water mark) of this process in bytes."""
    fields = {}
    for line in _STATUS.read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024  # reported in kB
    return fields["VmRSS"], fields["VmHWM"]


class PeakRSS:
    """Per-interval peak RSS. `start()` begins an interval; `metrics()` ends it and starts the next.

    Where the high-water mark cannot be reset (no /proc, or clear_refs not writable) it says so once in a warning
    and reports only the current RSS, never a lifetime peak under the per-interval name.
    """

    def __init__(self):
        self.resettable = _STATUS.exists()
        if not self.resettable:
            logger.warning("no /proc/self/status: memory metrics are not logged")

    def start(self) -> None:
        if not self.resettable:
            return
        try:
            _CLEAR_REFS.write_text("5")
        except OSError as error:
            self.resettable = False
            logger.warning("cannot reset the RSS high-water mark (%s): memory/peak_rss_gb is not logged", error)

    def metrics(self) -> dict[str, float]:
        """``memory/rss_gb`` now and ``memory/peak_rss_gb`` since `start` (GB = 1e9 bytes); then restarts."""
        if not _STATUS.exists():
            return {}
        rss, peak = rss_bytes()
        metrics = {"memory/rss_gb": rss / GB}
        if self.resettable:
            metrics["memory/peak_rss_gb"] = peak / GB
        self.start()
        return metrics


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is None:
        logger.info("the C library has no malloc_trim: freed memory is returned to the OS by its allocator alone")
    return trim


def release_free_memory() -> bool:
    """Return the free memory of every malloc arena to the OS (glibc), and, when this process has initialised CUDA,
    the CUDA caching allocator's unused blocks to the driver. False where malloc_trim is not available."""
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
