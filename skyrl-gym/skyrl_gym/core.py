"""The generic environment interface.

`Env` mirrors Gymnasium with two renames kept from upstream skyrl-gym: `reset` is `init`, and the
per-step `info` is called `metadata`. On top of upstream this class adds:

- async hooks `init_async` / `step_async` / `close_async`. An env may implement the sync methods, the
  async ones, or both. The defaults bridge the two: the async default runs the sync method in the
  event loop's default executor (so awaiting it never blocks the loop; the caller bounds that
  executor), and the sync default runs the async method to completion in a fresh event loop.
  `implements_async(env, "step")` tells a caller whether awaiting is native or bridged.
- `close()` / `close_async()` are idempotent, even when a subclass overrides them, and `Env` is a
  (sync and async) context manager that closes on exit.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Generic, TypedDict, TypeVar

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")

_HOOKS = ("init", "step", "close")


class EnvStepOutput(TypedDict, total=False):
    observations: Any
    reward: float
    done: bool
    metadata: dict[str, Any]


def _run_to_completion(coroutine, what: str):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise RuntimeError(
        f"{what} only has an async implementation and was called synchronously from a running event loop; "
        f"await {what}_async(...) instead."
    )


def _close_once(close):
    """Wrap a sync `close` so only the first call does work; super().close() calls inside it still run."""

    @functools.wraps(close)
    def wrapper(self):
        if self.__dict__.get("_skyrl_closing"):
            return close(self)
        if self.__dict__.get("_skyrl_closed"):
            return None
        self._skyrl_closing = True
        try:
            return close(self)
        finally:
            self._skyrl_closing = False
            self._skyrl_closed = True

    return wrapper


def _close_async_once(close_async):
    """The async twin of `_close_once`, sharing the same closed flag."""

    @functools.wraps(close_async)
    async def wrapper(self):
        if self.__dict__.get("_skyrl_closing"):
            return await close_async(self)
        if self.__dict__.get("_skyrl_closed"):
            return None
        self._skyrl_closing = True
        try:
            return await close_async(self)
        finally:
            self._skyrl_closing = False
            self._skyrl_closed = True

    return wrapper


class Env(Generic[ObsType, ActType]):
    """A stateful environment: `init` starts an episode, `step` advances it, `close` frees resources."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "close" in cls.__dict__:
            cls.close = _close_once(cls.__dict__["close"])
        if "close_async" in cls.__dict__:
            cls.close_async = _close_async_once(cls.__dict__["close_async"])

    def init(self, *args, **kwargs) -> tuple[ObsType, dict[str, Any]]:
        """Start an episode; returns `(observations, info)`."""
        if not implements_async(self, "init"):
            raise NotImplementedError(f"{type(self).__name__} must implement init() or init_async()")
        return _run_to_completion(self.init_async(*args, **kwargs), f"{type(self).__name__}.init")

    def step(self, action: ActType) -> EnvStepOutput:
        """Apply one action; returns observations, reward, done and metadata."""
        if not implements_async(self, "step"):
            raise NotImplementedError(f"{type(self).__name__} must implement step() or step_async()")
        return _run_to_completion(self.step_async(action), f"{type(self).__name__}.step")

    def close(self) -> None:
        """Free resources. Safe to call more than once; a no-op by default."""
        if implements_async(self, "close"):
            _run_to_completion(self.close_async(), f"{type(self).__name__}.close")

    async def init_async(self, *args, **kwargs) -> tuple[ObsType, dict[str, Any]]:
        return await _in_executor(functools.partial(self.init, *args, **kwargs))

    async def step_async(self, action: ActType) -> EnvStepOutput:
        return await _in_executor(functools.partial(self.step, action))

    async def close_async(self) -> None:
        if _overrides(type(self), "close"):
            await _in_executor(self.close)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close_async()

    def __str__(self) -> str:
        return f"Env({type(self).__name__})"


async def _in_executor(call):
    return await asyncio.get_running_loop().run_in_executor(None, call)


def _overrides(cls: type, method: str) -> bool:
    return getattr(cls, method) is not getattr(Env, method)


def implements_async(env: Env, hook: str) -> bool:
    """True when `env` (or its class) has its own `<hook>_async`, so a caller can await it directly."""
    if hook not in _HOOKS:
        raise ValueError(f"unknown env hook {hook!r}; expected one of {_HOOKS}")
    return _overrides(type(env), f"{hook}_async")
