"""`EnvRunner`: the one place that drives skyrl-gym envs, for the generator, the preflight and the validate command.

- make: `skyrl_gym.make(env_class, env_config=<the environment.skyrl_gym.<env_class> block>, extras=<the row's
  extras, with max_turns=generator.max_turns>)`, upstream's call (the generator's `max_turns` overrides a row's);
- init / step / close through `skyrl_gym.call_hook`: an env's own async hooks are awaited on the event loop; its
  sync methods run in a pool of `environment.skyrl_gym.max_env_workers` threads, or inline on the loop when that
  is 0 (then a slow sync env blocks every trajectory and cannot be timed out);
- turns: an `EnvSession` counts its episode's steps, and the step of turn `max_turns` comes back with
  `done=True` whatever the env said, so no episode runs past `generator.max_turns`. Envs that read `max_turns`
  from their extras (upstream's contract) end at that turn themselves; they still need it, to score or report
  their last turn;
- failures: making the env or its `init` raising ends the episode with `InfraFailed` (reason `env_init_failed`),
  `step` raising with `env_step_failed`; the failure's error is the env's own ("ExceptionType: message");
- timeouts: every call can be abandoned by the caller's timeout (`asyncio.timeout`); a sync call stuck in a pool
  thread keeps its thread (threads cannot be killed), one more reason to implement the async hooks. `close`
  never raises and is waited for at most `close_wait_s`; a slower close keeps running in the background.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import skyrl_gym
from skyrl_gym import Env, InfraFailure, InfraFailureReason
from skyrl_gym.envs.base_text_env import BaseTextEnvStepOutput, ConversationType

if TYPE_CHECKING:
    from skyrl_train.config.schema import SkyRLGymConfig

logger = logging.getLogger(__name__)

ENV_CLOSE_WAIT_SECONDS = 30.0
"""How long `EnvSession.close` waits for the env's `close()`; a slower close keeps running in the background."""


class InfraFailed(Exception):
    """An infrastructure failure ended an episode; `failure` is its typed record (the message is its error)."""

    def __init__(self, failure: InfraFailure):
        super().__init__(failure.error)
        self.failure = failure


class EnvRunner:
    """Makes envs and drives their episodes (see the module doc). `env_configs` is `environment.skyrl_gym`: its
    per-env blocks become each env's `env_config`, its `max_env_workers` sizes the pool for sync env calls."""

    def __init__(
        self, env_configs: SkyRLGymConfig, max_turns: int, close_wait_s: float = ENV_CLOSE_WAIT_SECONDS
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"generator.max_turns must be >= 1, got {max_turns}")
        self.env_configs = env_configs
        self.max_turns = max_turns
        self.close_wait_s = close_wait_s
        workers = env_configs.max_env_workers
        self.executor: Executor = (
            ThreadPoolExecutor(workers, thread_name_prefix="skyrl-env") if workers > 0 else _InlineExecutor()
        )

    def open(self, env_class: str, extras: Mapping[str, Any] | None) -> EnvSession:
        """Make the env for one episode; raises `InfraFailed` (`env_init_failed`) if that fails."""
        env_extras = {**(extras or {}), "max_turns": self.max_turns}
        try:
            env = skyrl_gym.make(env_class, env_config=self.env_configs.get_env_config(env_class), extras=env_extras)
        except Exception as error:
            raise InfraFailed(InfraFailure.from_exception(InfraFailureReason.ENV_INIT_FAILED, error)) from error
        return EnvSession(env, self)

    def shutdown(self) -> None:
        """Stop the pool's idle threads (a call still running keeps its thread until it returns)."""
        self.executor.shutdown(wait=False, cancel_futures=True)


class EnvSession:
    """One episode of one env: `init`, then `step`s (counted in `turns`), then `close`, which the caller awaits on
    every path (it never raises)."""

    def __init__(self, env: Env, runner: EnvRunner):
        self.env = env
        self.turns = 0
        """Steps sent to the env so far."""
        self._runner = runner

    async def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """The env's `init(prompt)`; raises `InfraFailed` (`env_init_failed`) if it raises."""
        try:
            return await skyrl_gym.call_hook(self.env, "init", prompt, executor=self._runner.executor)
        except Exception as error:
            raise InfraFailed(InfraFailure.from_exception(InfraFailureReason.ENV_INIT_FAILED, error)) from error

    async def step(self, action: str) -> BaseTextEnvStepOutput:
        """The env's `step(action)`, with `done` set on turn `max_turns`. Raises `InfraFailed` (`env_step_failed`)
        if the step raises or reports an `infra_failure` that is not a `skyrl_gym.InfraFailure`."""
        self.turns += 1
        try:
            output = await skyrl_gym.call_hook(self.env, "step", action, executor=self._runner.executor)
            _check_reported_failure(output)
        except Exception as error:
            raise InfraFailed(InfraFailure.from_exception(InfraFailureReason.ENV_STEP_FAILED, error)) from error
        if self.turns >= self._runner.max_turns and not output.get("done"):
            return BaseTextEnvStepOutput(**{**output, "done": True})
        return output

    async def close(self) -> None:
        """Close the env; never raises. Shielded, so a caller's timeout still lets the close run."""
        wait = self._runner.close_wait_s
        try:
            close = skyrl_gym.call_hook(self.env, "close", executor=self._runner.executor)
            await asyncio.wait_for(asyncio.shield(close), wait)
        except TimeoutError:
            logger.warning("%s: close() still running after %ss; not waiting for it", self.env, wait)
        except Exception:
            logger.warning("%s: close() raised", self.env, exc_info=True)


def _check_reported_failure(output: Mapping[str, Any]) -> None:
    reported = output.get("infra_failure")
    if reported is not None and not isinstance(reported, InfraFailure):
        raise TypeError(
            f"step output 'infra_failure' must be a skyrl_gym.InfraFailure, got {type(reported).__name__}: {reported!r}"
        )


class _InlineExecutor(Executor):
    """Runs each call at once in the calling thread (`max_env_workers=0`)."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as error:
            future.set_exception(error)
        return future
