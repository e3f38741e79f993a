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
- `call_hook(env, hook, *args, executor=...)`: how a caller (the trainer's env runner) drives an env: the env's
  own async hook is awaited, a sync one runs in the caller's executor. It is the one sync/async bridge; the
  default `*_async` methods use its thread half.
- `InfraFailure`: the typed record of an infrastructure failure (`InfraFailureReason` plus the error text). An env
  that recovered from one during a step (a tool server crashed and was restarted, a simulated user's endpoint
  failed) returns it under the step output's `infra_failure` key; the trainer keeps that trajectory out of
  training and reports the error. Envs that never set the key (all of upstream's) are unaffected.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import Any, ClassVar, Generic, TypedDict, TypeVar

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")

_HOOKS = ("init", "step", "close")


class InfraFailureReason(enum.StrEnum):
    """Why an episode's infrastructure failed: its trajectory's stop reason, kept out of the advantage baseline
    instead of being scored as a task failure. The one definition every reader (trainer, metrics, eval dumps,
    the analysis CLI) uses."""

    ENV_INIT_FAILED = "env_init_failed"
    """Making the env or its `init` raised."""
    ENV_STEP_FAILED = "env_step_failed"
    """A `step` raised."""
    TIMEOUT = "timeout"
    """The trajectory ran out of its time budget."""
    TOOL_SERVER_FAILED = "tool_server_failed"
    """The env recovered from a tool-server failure (reported by the env on a step) and went on."""
    USER_SIMULATOR_FAILED = "user_simulator_failed"
    """The env's simulated user (e.g. an LLM endpoint) failed (reported by the env on a step)."""
    ENGINE_FAILED = "engine_failed"
    """The inference engine serving the episode became unreachable."""


@dataclasses.dataclass(frozen=True)
class InfraFailure:
    """An infrastructure failure: which kind, and what went wrong, as text."""

    reason: InfraFailureReason
    error: str

    def __post_init__(self):
        object.__setattr__(self, "reason", InfraFailureReason(self.reason))

    @classmethod
    def from_exception(cls, reason: InfraFailureReason, error: BaseException) -> InfraFailure:
        """The failure `error` caused, described as "ExceptionType: message"."""
        return cls(reason, f"{type(error).__name__}: {error}")

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason.value, "error": self.error}

    @classmethod
    def from_json(cls, data: Any, where: str = "infra_failure") -> InfraFailure:
        """Read `to_json`'s form back; a bad value raises ValueError naming `where` and the key at fault."""
        if not isinstance(data, Mapping) or not isinstance(data.get("error"), str):
            raise ValueError(f"{where}: expected an object with a 'reason' and an 'error' string, got {data!r}")
        try:
            return cls(data.get("reason"), data["error"])
        except ValueError:
            known = ", ".join(reason.value for reason in InfraFailureReason)
            raise ValueError(f"{where}.reason: expected one of {known}, got {data.get('reason')!r}") from None


class EnvStepOutput(TypedDict, total=False):
    observations: Any
    reward: float
    done: bool
    metadata: dict[str, Any]
    infra_failure: InfraFailure
    """Set only by an env that recovered from an infrastructure failure during this step (see the module doc)."""


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

    env_config_keys: ClassVar[frozenset[str] | None] = None
    """The keys this env reads from its config block (the trainer's `environment.skyrl_gym.<env id>`, passed as
    `env_config`): the trainer's config validation refuses any other key there. None: not declared (an env written
    for upstream skyrl-gym), the block is passed unchecked."""

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


async def _in_executor(call, executor: Executor | None = None):
    return await asyncio.get_running_loop().run_in_executor(executor, call)


async def call_hook(env: Env, hook: str, *args, executor: Executor | None = None) -> Any:
    """Run `env.<hook>(*args)` from async code: await the env's own `<hook>_async` when it has one (on the
    caller's loop); otherwise run the sync `<hook>` in `executor` (the loop's default executor when None), so the
    loop is never blocked and a caller's timeout can abandon the call."""
    if implements_async(env, hook):
        return await getattr(env, f"{hook}_async")(*args)
    return await _in_executor(functools.partial(getattr(env, hook), *args), executor)


def _overrides(cls: type, method: str) -> bool:
    return getattr(cls, method) is not getattr(Env, method)


def implements_async(env: Env, hook: str) -> bool:
    """True when `env` (or its class) has its own `<hook>_async`, so a caller can await it directly."""
    if hook not in _HOOKS:
        raise ValueError(f"unknown env hook {hook!r}; expected one of {_HOOKS}")
    return _overrides(type(env), f"{hook}_async")
