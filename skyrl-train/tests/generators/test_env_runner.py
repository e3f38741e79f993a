"""`EnvRunner` on its own: what it gives the env, where env calls run, failures as typed `InfraFailed`, timeouts,
and the turn count that ends an episode at `generator.max_turns`."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import skyrl_gym
from skyrl_gym import InfraFailure, InfraFailureReason
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_train.config.schema import SkyRLGymConfig
from skyrl_train.generators.env_runner import EnvRunner, InfraFailed

from .conftest import ASYNC_ENV, SYNC_ENV

PROMPT = [{"role": "user", "content": "What is 2+2?"}]
SLOW_CLOSE_ENV = "test_slow_close"


def runner(max_turns: int = 3, max_env_workers: int = 2, env_configs: dict | None = None, **kwargs) -> EnvRunner:
    return EnvRunner(
        SkyRLGymConfig(max_env_workers=max_env_workers, env_configs=env_configs or {}), max_turns, **kwargs
    )


def going_on(reward: float = 0.0) -> dict:
    return {"observations": [{"role": "user", "content": "Go on."}], "reward": reward, "done": False, "metadata": {}}


def finished(reward: float = 1.0) -> dict:
    return {"observations": [], "reward": reward, "done": True, "metadata": {}}


class SlowCloseEnv(BaseTextEnv):
    def __init__(self, env_config=None, extras=None):
        super().__init__()

    def step(self, action):
        return finished()

    async def close_async(self):
        await asyncio.sleep(30)


@pytest.fixture
def slow_close_env():
    skyrl_gym.register(SLOW_CLOSE_ENV, SlowCloseEnv)
    yield SLOW_CLOSE_ENV
    skyrl_gym.deregister(SLOW_CLOSE_ENV)


# ------------------------------------------------------------------------------------------------ make


def test_the_env_gets_its_config_block_and_the_rows_extras_with_the_runners_max_turns(scripted_envs):
    session = runner(max_turns=7, env_configs={SYNC_ENV: {"api_url": "http://x"}}).open(
        SYNC_ENV, {"data_source": "d", "max_turns": 2}
    )
    env = scripted_envs[0]
    assert session.env is env
    assert (env.extras["data_source"], env.extras["max_turns"], env.env_config.api_url) == ("d", 7, "http://x")


def test_an_unknown_env_id_is_an_init_failure():
    with pytest.raises(InfraFailed) as failed:
        runner().open("no_such_env", {})
    assert failed.value.failure.reason == InfraFailureReason.ENV_INIT_FAILED
    assert failed.value.failure.error.startswith("Error: No registered env with id 'no_such_env'.")


def test_a_constructor_that_raises_is_an_init_failure():
    with pytest.raises(InfraFailed) as failed:
        runner().open(SYNC_ENV, {"fail_in": "make"})
    assert failed.value.failure == InfraFailure(
        InfraFailureReason.ENV_INIT_FAILED, "RuntimeError: cannot reach the env server"
    )


# ----------------------------------------------------------------------------------- the sync/async bridge


async def test_sync_env_calls_run_in_the_runners_pool_threads(scripted_envs):
    session = runner().open(SYNC_ENV, {"script": [finished()]})
    assert await session.init(PROMPT) == (PROMPT, {})
    assert await session.step("4") == finished()
    await session.close()
    assert {hook: name.startswith("skyrl-env") for hook, name in scripted_envs[0].threads.items()} == {
        "init": True,
        "step": True,
        "close": True,
    }


async def test_async_env_hooks_are_awaited_on_the_event_loop(scripted_envs):
    session = runner().open(ASYNC_ENV, {"script": [finished()]})
    await session.init(PROMPT)
    await session.step("4")
    await session.close()
    loop_thread = threading.current_thread().name
    assert scripted_envs[0].threads == {"init": loop_thread, "step": loop_thread, "close": loop_thread}


async def test_zero_workers_run_sync_env_calls_inline_on_the_loop(scripted_envs):
    session = runner(max_env_workers=0).open(SYNC_ENV, {"script": [finished()]})
    await session.init(PROMPT)
    await session.step("4")
    await session.close()
    assert set(scripted_envs[0].threads.values()) == {threading.current_thread().name}


# ------------------------------------------------------------------------------------------- failures


@pytest.mark.parametrize("env_class", [SYNC_ENV, ASYNC_ENV])
async def test_init_that_raises_is_an_init_failure(env_class):
    session = runner().open(env_class, {"fail_in": "init"})
    with pytest.raises(InfraFailed) as failed:
        await session.init(PROMPT)
    assert failed.value.failure == InfraFailure(InfraFailureReason.ENV_INIT_FAILED, "RuntimeError: env init failed")


@pytest.mark.parametrize("env_class", [SYNC_ENV, ASYNC_ENV])
async def test_step_that_raises_is_a_step_failure(env_class):
    session = runner().open(env_class, {"script": [going_on()], "fail_in": "step:2"})
    await session.init(PROMPT)
    await session.step("3")
    with pytest.raises(InfraFailed) as failed:
        await session.step("4")
    assert failed.value.failure == InfraFailure(
        InfraFailureReason.ENV_STEP_FAILED, "ConnectionError: tool server crashed"
    )


async def test_a_reported_failure_that_is_not_typed_is_a_step_failure():
    flagged = {**going_on(), "infra_failure": "tool_server_crashed"}
    session = runner().open(SYNC_ENV, {"script": [flagged]})
    await session.init(PROMPT)
    with pytest.raises(InfraFailed) as failed:
        await session.step("4")
    assert failed.value.failure == InfraFailure(
        InfraFailureReason.ENV_STEP_FAILED,
        "TypeError: step output 'infra_failure' must be a skyrl_gym.InfraFailure, got str: 'tool_server_crashed'",
    )


async def test_a_typed_reported_failure_is_passed_through():
    crash = InfraFailure(InfraFailureReason.TOOL_SERVER_FAILED, "the tool server 'toy' stopped responding")
    session = runner().open(SYNC_ENV, {"script": [{**going_on(), "infra_failure": crash}]})
    await session.init(PROMPT)
    assert (await session.step("4"))["infra_failure"] == crash


# ------------------------------------------------------------------------------------------- timeouts


async def test_a_hanging_sync_step_is_abandoned_at_the_callers_timeout_and_the_env_still_closes(scripted_envs):
    session = runner().open(SYNC_ENV, {"script": [finished()], "block_step": True})  # blocks up to 30 s
    await session.init(PROMPT)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await session.step("4")
    assert time.monotonic() - start < 5
    await session.close()
    assert scripted_envs[0].close_calls == 1


async def test_a_close_that_hangs_is_waited_for_at_most_close_wait_s(slow_close_env):
    session = runner(close_wait_s=0.2).open(slow_close_env, {})
    start = time.monotonic()
    await session.close()  # never raises
    assert time.monotonic() - start < 5  # the close itself takes 30 s


# ------------------------------------------------------------------------------------------ max_turns


@pytest.mark.parametrize("env_class", [SYNC_ENV, ASYNC_ENV])
async def test_the_step_of_turn_max_turns_ends_the_episode(env_class, scripted_envs):
    session = runner(max_turns=3).open(env_class, {"script": [going_on(0.1), going_on(0.2), going_on(0.3)]})
    await session.init(PROMPT)
    steps = [await session.step(action) for action in ("a", "b", "c")]
    assert [(step["done"], step["reward"]) for step in steps] == [(False, 0.1), (False, 0.2), (True, 0.3)]
    assert steps[2]["observations"] == going_on()["observations"]
    assert (session.turns, scripted_envs[0].actions) == (3, ["a", "b", "c"])


async def test_an_env_that_ends_earlier_keeps_its_own_end():
    session = runner(max_turns=3).open(SYNC_ENV, {"script": [going_on(), finished(0.5)]})
    await session.init(PROMPT)
    steps = [await session.step("a"), await session.step("b")]
    assert ([step["done"] for step in steps], session.turns) == ([False, True], 2)


async def test_a_single_turn_limit_ends_after_the_first_step():
    session = runner(max_turns=1).open(SYNC_ENV, {"script": [going_on()]})
    await session.init(PROMPT)
    assert ((await session.step("a"))["done"], session.turns) == (True, 1)


def test_max_turns_below_one_is_rejected():
    with pytest.raises(ValueError, match="generator.max_turns must be >= 1, got 0"):
        runner(max_turns=0)
