"""Progress of a long phase (rollouts, eval, model conversion, dataset generation), the same wherever it runs.

On a terminal (stderr is a TTY) it is a tqdm bar on stderr: items done of the total, items/s, elapsed and ETA, and the
tokens/s of the items counted so far when the caller counts tokens. Anywhere else (a log file, CI, a pipe) it is a log
line on the caller's logger, at most every ``interval_s`` seconds and once when the last item is done::

    generate (eval, step 3): 2/4 trajectories done (31 s, 12.3 tokens/s, ETA 31 s)

The ETA is the mean time per item so far times the items left.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

__all__ = ["Progress"]


class Progress:
    """``total`` items of a phase called ``label``; `advance` after each, `close` at the end (or use ``with``).

    Args:
        unit, units: one item and several, e.g. ``"trajectory"``, ``"trajectories"`` (default: ``unit + "s"``).
        logger: where the log lines go when there is no terminal (default: this module's).
        terminal: draw a bar (True) or log lines (False); default: whether stderr is a TTY.
        interval_s, clock: the log lines' minimum spacing, and the clock that measures it and the rates.
    """

    def __init__(
        self,
        total: int,
        label: str,
        *,
        unit: str = "item",
        units: str | None = None,
        logger: logging.Logger | None = None,
        terminal: bool | None = None,
        interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total, self.label, self.units = total, label, units or f"{unit}s"
        self.logger = logger or logging.getLogger(__name__)
        self.interval_s, self.clock = interval_s, clock
        self.done = self.tokens = 0
        self.start = self.last_logged = clock()
        self._bar = None
        if sys.stderr.isatty() if terminal is None else terminal:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=label, unit=unit, dynamic_ncols=True, file=sys.stderr)

    def advance(self, n: int = 1, tokens: int = 0) -> None:
        """``n`` more items done, which produced ``tokens`` tokens (0: not counted)."""
        self.done += n
        self.tokens += tokens
        now = self.clock()
        if self._bar is not None:
            if self.tokens:
                self._bar.set_postfix_str(f"{self._token_rate(now):.1f} tokens/s", refresh=False)
            self._bar.update(n)
        elif self.done >= self.total or now - self.last_logged >= self.interval_s:
            self.last_logged = now
            self.logger.info("%s", self.line(now))

    def line(self, now: float) -> str:
        """The log line at time ``now`` (see the module docstring)."""
        elapsed = now - self.start
        parts = [f"{elapsed:.0f} s"]
        if self.tokens:
            parts.append(f"{self._token_rate(now):.1f} tokens/s")
        if 0 < self.done < self.total:
            parts.append(f"ETA {elapsed / self.done * (self.total - self.done):.0f} s")
        return f"{self.label}: {self.done}/{self.total} {self.units} done ({', '.join(parts)})"

    def _token_rate(self, now: float) -> float:
        return self.tokens / max(now - self.start, 1e-9)

    def close(self) -> None:
        """Take the bar off the terminal (safe to call twice; nothing to do for log lines)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
