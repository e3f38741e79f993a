"""The Env base class: sync/async bridging, idempotent close, context managers; the typed `InfraFailure`."""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from skyrl_gym import Env, InfraFailure, InfraFailureReason, call_hook, implements_async
from skyrl_gym.envs.base_text_env import BaseTextEnv


class SyncEnv(BaseTextEnv):
    def __init__(self):
        super().__init__()
        self.step_threads = []
        self.closes = 0

    def step(self, action):
        self.step_threads.append(threading.get_ident())
        return {"observations": [], "reward": float(len(action)), "done": True, "metadata": {}}

    def close(self):
        self.closes += 1


class AsyncOnlyEnv(BaseTextEnv):
    def __init__(self):
        super().__init__()
        self.closes = 0

    async def init_async(self, prompt):
        await asyncio.sleep(0)
        return [{"role": "system", "content": "async"}, *prompt], {"async": True}

    async def step_async(self, action):
        await asyncio.sleep(0)
        return {"observations": [{"role": "user", "content": action.upper()}], "reward": 1.0, "done": False}

    async def close_async(self):
        self.closes += 1


class NoStepEnv(BaseTextEnv):
    pass


def test_sync_env_is_awaitable_and_runs_off_the_event_loop_thread():
    env = SyncEnv()

    async def drive():
        return await env.step_async("abc"), threading.get_ident()

    out, loop_thread = asyncio.run(drive())
    assert out["reward"] == 3.0
    assert env.step_threads and env.step_threads[0] != loop_thread


def test_async_only_env_is_callable_synchronously():
    env = AsyncOnlyEnv()
    prompt, info = env.init([{"role": "user", "content": "hi"}])
    assert prompt == [{"role": "system", "content": "async"}, {"role": "user", "content": "hi"}]
    assert info == {"async": True}
    assert env.step("go")["observations"] == [{"role": "user", "content": "GO"}]


def test_async_only_env_called_synchronously_inside_a_running_loop_says_to_await():
    env = AsyncOnlyEnv()

    async def drive():
        env.step("go")

    with pytest.raises(RuntimeError, match="await AsyncOnlyEnv.step_async"):
        asyncio.run(drive())


def test_implements_async_distinguishes_native_from_bridged_hooks():
    assert implements_async(AsyncOnlyEnv(), "step")
    assert implements_async(AsyncOnlyEnv(), "close")
    assert not implements_async(SyncEnv(), "step")
    assert not implements_async(SyncEnv(), "init")
    with pytest.raises(ValueError, match="unknown env hook"):
        implements_async(SyncEnv(), "reset")


def test_env_without_step_raises_a_clear_error():
    with pytest.raises(NotImplementedError, match="NoStepEnv must implement step"):
        NoStepEnv().step("x")


def test_base_text_env_defaults():
    env = NoStepEnv()
    prompt = [{"role": "user", "content": "q"}]
    assert env.init(prompt) == (prompt, {})
    assert (env.turns, env.max_turns, env.tool_groups, env.tool_to_toolgroup) == (0, 1, [], {})
    assert env.get_metrics() == {}
    assert str(env) == "Env(NoStepEnv)"


def test_close_twice_closes_once():
    env = SyncEnv()
    env.close()
    env.close()
    assert env.closes == 1


def test_close_async_then_close_closes_once():
    env = AsyncOnlyEnv()
    asyncio.run(env.close_async())
    env.close()
    assert env.closes == 1


def test_close_of_sync_env_via_close_async_closes_once():
    env = SyncEnv()
    asyncio.run(env.close_async())
    asyncio.run(env.close_async())
    env.close()
    assert env.closes == 1


def test_close_chained_through_super_runs_every_level_once():
    calls = []

    class Parent(BaseTextEnv):
        def step(self, action):
            return {"observations": [], "reward": 0.0, "done": True}

        def close(self):
            calls.append("parent")

    class Child(Parent):
        def close(self):
            calls.append("child")
            super().close()

    env = Child()
    env.close()
    env.close()
    assert calls == ["child", "parent"]


def test_close_that_raises_is_not_retried():
    class Flaky(SyncEnv):
        def close(self):
            self.closes += 1
            raise OSError("socket already gone")

    env = Flaky()
    with pytest.raises(OSError):
        env.close()
    env.close()
    assert env.closes == 1


def test_context_manager_closes_on_exit_even_on_error():
    env = SyncEnv()
    with pytest.raises(KeyError), env as entered:
        assert entered is env
        raise KeyError("boom")
    assert env.closes == 1


def test_async_context_manager_closes_on_exit():
    env = AsyncOnlyEnv()

    async def drive():
        async with env as entered:
            assert entered is env

    asyncio.run(drive())
    assert env.closes == 1


def test_plain_env_subclass_is_generic_env():
    class Counter(Env[int, int]):
        def init(self):
            self.n = 0
            return self.n, {}

        def step(self, action):
            self.n += action
            return {"observations": self.n, "reward": 0.0, "done": self.n >= 3}

    env = Counter()
    env.init()
    assert env.step(2)["done"] is False
    assert env.step(1)["done"] is True


def test_call_hook_awaits_an_async_hook_on_the_callers_loop():
    env = AsyncOnlyEnv()
    assert asyncio.run(call_hook(env, "step", "go"))["observations"] == [{"role": "user", "content": "GO"}]


def test_call_hook_runs_a_sync_hook_in_the_given_executor():
    env = SyncEnv()
    with ThreadPoolExecutor(1) as pool:
        out = asyncio.run(call_hook(env, "step", "abcd", executor=pool))
        pool_thread = pool.submit(threading.get_ident).result()
    assert (out["reward"], env.step_threads) == (4.0, [pool_thread])


def test_infra_failure_round_trips_through_json():
    failure = InfraFailure(InfraFailureReason.TOOL_SERVER_FAILED, "the tool server 'toy' stopped responding")
    assert failure.to_json() == {"reason": "tool_server_failed", "error": "the tool server 'toy' stopped responding"}
    assert InfraFailure.from_json(failure.to_json()) == failure


def test_infra_failure_reason_is_coerced_from_its_string():
    assert InfraFailure("timeout", "x").reason is InfraFailureReason.TIMEOUT


def test_infra_failure_from_an_exception_names_its_type():
    error = ConnectionError("refused")
    assert InfraFailure.from_exception(InfraFailureReason.ENV_INIT_FAILED, error).error == "ConnectionError: refused"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"reason": "crashed", "error": "x"}, "row 3: infra_failure.reason: expected one of env_init_failed, "),
        ({"reason": "timeout"}, "row 3: infra_failure: expected an object with a 'reason' and an 'error' string"),
        ("timeout", "row 3: infra_failure: expected an object"),
    ],
)
def test_infra_failure_from_bad_json_names_the_key(data, message):
    with pytest.raises(ValueError) as bad:
        InfraFailure.from_json(data, "row 3: infra_failure")
    assert str(bad.value).startswith(message)
