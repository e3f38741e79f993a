"""`BackgroundUploader`: runs upload jobs one at a time, in submission order, on a daemon thread.

Training never waits for an upload, except at the end: `close()` waits up to `flush_timeout` seconds for the
queue to drain, then logs an error naming every job that did not finish (their local copies are kept, as the
jobs only delete local data after a verified upload). `install_exit_handlers()` makes the same bounded flush
happen however the process ends in Python:

- normal exit, or an exception: the owner calls `close()` in a `finally` (and `atexit` runs it otherwise);
- SIGINT: Python raises KeyboardInterrupt, which unwinds to that `finally`;
- SIGTERM: the handler raises `SystemExit(143)` in the main thread, so the stack unwinds the same way (locks
  released, partial checkpoints cleaned by their own handlers) before the flush. The previous handler is
  restored first, so a second SIGTERM ends the process at once.

SIGKILL cannot be caught; what it interrupts is repaired on the next start (see `skyrl_train.checkpoints`).
"""

from __future__ import annotations

import atexit
import logging
import queue
import signal
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

_SIGTERM_EXIT_CODE = 128 + signal.SIGTERM


class BackgroundUploader:
    """A queue of upload jobs. A job reports its own outcome; an exception it raises is logged, not re-raised.

    `submit(label, job)` returns at once. `label` names the job in messages ("checkpoint <path>").
    """

    def __init__(self, flush_timeout: float = 600.0, name: str = "s3-upload"):
        self.flush_timeout = flush_timeout
        self._queue: queue.Queue = queue.Queue()
        self._pending: list[str] = []
        self._cond = threading.Condition()
        self._closed = False
        self._previous_sigterm = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, label: str, job: Callable[[], None]) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError(f"the uploader is closed: {label} was not queued")
            self._pending.append(label)
        self._queue.put((label, job))

    def pending(self) -> list[str]:
        """Labels of the jobs queued or running, oldest first."""
        with self._cond:
            return list(self._pending)

    def flush(self, timeout: float | None = None) -> list[str]:
        """Wait until every submitted job has finished, or `timeout` seconds; returns the labels still pending."""
        with self._cond:
            self._cond.wait_for(lambda: not self._pending, timeout=timeout)
            return list(self._pending)

    def close(self, timeout: float | None = None) -> list[str]:
        """Flush (up to `timeout`, default `flush_timeout`), stop the worker and remove the exit handlers.

        Returns the labels of jobs that did not finish; they are also logged as an error. Safe to call twice.
        """
        with self._cond:
            if self._closed:
                return list(self._pending)
        wait = self.flush_timeout if timeout is None else timeout
        if self.pending():
            logger.info(
                "waiting up to %.0f s for %d pending S3 upload(s): %s", wait, len(self.pending()), self.pending()
            )
        try:
            left = self.flush(wait)
        except KeyboardInterrupt:
            _report_unfinished(self.pending(), "interrupted while waiting")
            raise
        _report_unfinished(left, f"still running after {wait:g} s")
        with self._cond:
            self._closed = True
        self._queue.put(None)
        self._uninstall_exit_handlers()
        return left

    def install_exit_handlers(self) -> None:
        """Flush at interpreter exit, and turn SIGTERM into `SystemExit` so `finally` blocks flush too.

        The SIGTERM handler is installed only from the main thread and only over the default handler (a handler
        set by someone else is left alone, and said so).
        """
        atexit.register(self.close)
        if threading.current_thread() is not threading.main_thread():
            logger.warning("S3 uploader started outside the main thread: SIGTERM will not flush pending uploads")
            return
        current = signal.getsignal(signal.SIGTERM)
        if current is not signal.SIG_DFL:
            logger.warning(
                "SIGTERM already has a handler (%r): it is kept; pending uploads flush only on exit", current
            )
            return
        self._previous_sigterm = current
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum, frame) -> None:
        signal.signal(signal.SIGTERM, self._previous_sigterm)
        self._previous_sigterm = None
        logger.warning("SIGTERM received: stopping; pending S3 uploads get up to %.0f s", self.flush_timeout)
        raise SystemExit(_SIGTERM_EXIT_CODE)

    def _uninstall_exit_handlers(self) -> None:
        atexit.unregister(self.close)
        if self._previous_sigterm is not None and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            label, job = item
            try:
                job()
            except Exception:
                logger.exception("upload job %s failed unexpectedly", label)
            finally:
                with self._cond:
                    self._pending.remove(label)
                    self._cond.notify_all()


def _report_unfinished(labels: list[str], why: str) -> None:
    if labels:
        logger.error(
            "%d S3 upload(s) NOT finished (%s); their local copies are kept: %s", len(labels), why, "; ".join(labels)
        )
