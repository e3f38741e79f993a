"""How a trainer process takes turns with the benchmark's driver: one step per go-ahead, a JSON report after each.

The driver (`compare.py`) starts each trainer as a child process with a pipe on fd `BENCH_REPORT_FD` and writes one
line on the child's stdin per step it allows. The child blocks in `wait_for_go` between steps, so the two trainers
never run at the same time, and reports each step with `report`. Memory figures come from /proc: the step's peak
RSS is the kernel's high-water mark (VmHWM), which `reset_peak_rss` sets back to the current RSS after each report.
Standard library only: the TRL side runs in its own venv.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

REPORT_FD_ENV = "BENCH_REPORT_FD"


def wait_for_go() -> bool:
    """Block until the driver allows the next step; False when it says stop (or closed the pipe)."""
    line = sys.stdin.readline()
    return line.strip() == "go"


def report(record: dict[str, Any]) -> None:
    """Send one step's figures to the driver."""
    with os.fdopen(int(os.environ[REPORT_FD_ENV]), "w", closefd=False) as out:
        out.write(json.dumps(record) + "\n")
        out.flush()


def rss_gb() -> dict[str, float]:
    """Current and peak (since the last `reset_peak_rss`) resident set size of this process, in GB (1e9 bytes)."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024 / 1e9
    return {"rss_gb": fields["VmRSS"], "peak_rss_gb": fields["VmHWM"]}


def reset_peak_rss() -> None:
    """Set the peak-RSS mark back to the current RSS (Linux: writing 5 to /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
