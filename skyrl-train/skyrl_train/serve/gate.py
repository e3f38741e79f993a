"""`ServingGate`: lets HTTP requests reach an engine the trainer shares only while the trainer allows it.

The trainer's live-policy endpoint serves the very module the trainer optimises. A generation running while the
optimizer steps would read half-updated weights, so HTTP requests are admitted only inside serving windows (the
trainer's generation phases): outside a window they wait at the gate, and closing the gate waits for the requests
already admitted to finish. The gate is thread-safe and loop-agnostic: requests wait on the endpoint's event loop,
while the trainer opens and closes it from its own loop. At most `max_waiting` requests wait; one more is refused
at once with `ServingBusy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator

from skyrl_train.serve.limits import ServeLimits


class ServingStopped(RuntimeError):
    """The endpoint is shutting down; requests waiting at the gate are released with this error."""


class ServingBusy(RuntimeError):
    """The gate is closed and its waiting list is full; the request is refused instead of queued."""


class ServingGate:
    """Admission control between HTTP requests and the trainer (see the module docstring).

    Args:
        is_open: the initial state; the trainer's endpoint starts closed (weights may still change, e.g. a resumed
            checkpoint loading) and opens at the first generation phase.
        max_waiting: most requests waiting while the gate is closed (`ServeLimits.max_waiting`).
    """

    def __init__(self, is_open: bool = False, max_waiting: int = ServeLimits.max_waiting):
        self.max_waiting = max_waiting
        self._lock = threading.Lock()
        self._open = is_open
        self._stopped = False
        self._in_flight = 0
        self._open_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self._drain_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def in_flight(self) -> int:
        """Requests admitted and not yet finished."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Requests waiting for the gate to open."""
        with self._lock:
            return len(self._open_waiters)

    @contextlib.asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        """Wait until the gate is open, then hold it open (closing waits) until the block exits. Raises
        `ServingBusy` when `max_waiting` requests already wait, `ServingStopped` once the gate is stopped."""
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._stopped:
                    raise ServingStopped("the endpoint is shutting down")
                if self._open:
                    self._in_flight += 1
                    break
                if len(self._open_waiters) >= self.max_waiting:
                    raise ServingBusy(
                        f"the server is not generating now and {self.max_waiting} requests already wait; retry later"
                    )
                waiter = loop.create_future()
                self._open_waiters.append((loop, waiter))
            try:
                await waiter
            finally:
                with self._lock:
                    if (loop, waiter) in self._open_waiters:
                        self._open_waiters.remove((loop, waiter))
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                if self._in_flight == 0:
                    _wake(self._drain_waiters)

    def open(self) -> None:
        """Admit waiting and new requests."""
        with self._lock:
            self._open = True
            _wake(self._open_waiters)

    async def close(self) -> None:
        """Stop admitting requests, then wait until every admitted request has finished."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._open = False
            if self._in_flight == 0:
                return
            waiter = loop.create_future()
            self._drain_waiters.append((loop, waiter))
        await waiter

    def stop(self) -> None:
        """Refuse every waiting and future request with `ServingStopped` (requests already admitted finish)."""
        with self._lock:
            self._stopped = True
            self._open = False
            _wake(self._open_waiters)


def _wake(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]]) -> None:
    """Resolve every waiter on its own loop and forget them (called with the gate's lock held)."""
    for loop, future in waiters:
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_resolve, future)
    waiters.clear()


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
