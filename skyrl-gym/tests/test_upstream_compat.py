"""An env module written against upstream skyrl-gym runs here unchanged.

The module below uses only upstream's import paths and idioms (typing.Dict, the mutable `extras={}`
default, `BaseTextEnvStepOutput(...)` construction, `_execute_tool` with a list, a static
`aggregate_metrics`); it is written into a temporary package and driven through `skyrl_gym.make`.
"""

import textwrap

import pytest

import skyrl_gym
from skyrl_gym.metrics import aggregate_for_environment

UPSTREAM_STYLE_ENV = textwrap.dedent("""
    import re
    from typing import Any, Dict, List

    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType
    from skyrl_gym.envs.registration import register
    from skyrl_gym.tools.core import ToolGroup, tool


    class CalculatorToolGroup(ToolGroup):
        def __init__(self):
            super().__init__(name="CalculatorToolGroup")

        @tool
        def multiply(self, a: str, b: str) -> str:
            return str(int(a) * int(b))


    class MultiplyEnv(BaseTextEnv):
        def __init__(self, env_config: Any = None, extras: Dict[str, Any] = {}):
            super().__init__()
            assert "reward_spec" in extras, "reward_spec field is required"
            self.ground_truth = extras["reward_spec"]["ground_truth"]
            self.max_turns = extras["max_turns"] if "max_turns" in extras else 3
            self.greeting = (env_config or {}).get("greeting", "")
            self.init_tool_groups([CalculatorToolGroup()])
            self.tool_calls = 0
            self.closed = False

        def init(self, prompt: ConversationType):
            return [{"role": "system", "content": self.greeting}] + prompt, {"max_turns": self.max_turns}

        def step(self, action: str) -> BaseTextEnvStepOutput:
            self.turns += 1
            call = re.search(r"<multiply>(\\d+),(\\d+)</multiply>", action)
            answer = re.search(r"<answer>(\\d+)</answer>", action)
            if answer:
                reward = 1.0 if answer.group(1) == self.ground_truth else 0.0
                return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={"answer": answer.group(1)})
            if call:
                self.tool_calls += 1
                result = self._execute_tool("CalculatorToolGroup", "multiply", [call.group(1), call.group(2)])
                observation = "<result>" + result + "</result>"
            else:
                observation = "Use <multiply>a,b</multiply> or <answer>n</answer>."
            done = self.turns >= self.max_turns
            return BaseTextEnvStepOutput(
                observations=[{"role": "user", "content": observation}], reward=0.0, done=done, metadata={}
            )

        def get_metrics(self) -> Dict[str, Any]:
            return {"tool_calls": self.tool_calls, "turns": self.turns}

        @staticmethod
        def aggregate_metrics(metrics: List[Dict[str, Any]]) -> Dict[str, Any]:
            n = len(metrics)
            return {"avg_tool_calls": sum(m["tool_calls"] for m in metrics) / n, "episodes": n}

        def close(self):
            self.closed = True


    def register_env():
        register(id="upstream_multiply", entry_point="upstream_style_pkg.multiply_env:MultiplyEnv")
    """)


@pytest.fixture
def upstream_env(tmp_path, monkeypatch, clean_registry):
    package = tmp_path / "upstream_style_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "multiply_env.py").write_text(UPSTREAM_STYLE_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    from upstream_style_pkg.multiply_env import register_env

    register_env()
    return "upstream_multiply"


def make(env_id, max_turns=3):
    extras = {"reward_spec": {"method": "rule", "ground_truth": "42"}, "data_source": "toy", "max_turns": max_turns}
    return skyrl_gym.make(env_id, env_config={"greeting": "You multiply."}, extras=extras)


def test_full_episode_with_a_tool_call_and_a_correct_answer(upstream_env):
    env = make(upstream_env)
    prompt, info = env.init([{"role": "user", "content": "What is 6 times 7?"}])
    assert prompt == [
        {"role": "system", "content": "You multiply."},
        {"role": "user", "content": "What is 6 times 7?"},
    ]
    assert info == {"max_turns": 3}

    first = env.step("<multiply>6,7</multiply>")
    assert first == {"observations": [{"role": "user", "content": "<result>42</result>"}], "reward": 0.0,
                     "done": False, "metadata": {}}  # fmt: skip
    second = env.step("<answer>42</answer>")
    assert (second["reward"], second["done"], second["metadata"]) == (1.0, True, {"answer": "42"})

    assert env.get_metrics() == {"tool_calls": 1, "turns": 2}
    env.close()
    env.close()
    assert env.closed


def test_episode_ends_at_max_turns(upstream_env):
    env = make(upstream_env, max_turns=2)
    env.init([{"role": "user", "content": "?"}])
    assert env.step("hmm")["done"] is False
    last = env.step("still thinking")
    assert (last["done"], last["reward"]) == (True, 0.0)


def test_metrics_aggregate_with_the_envs_own_static_method(upstream_env):
    per_episode = []
    for calls in (0, 2):
        env = make(upstream_env)
        env.init([{"role": "user", "content": "?"}])
        for _ in range(calls):
            env.step("<multiply>2,3</multiply>")
        per_episode.append(env.get_metrics())
    assert aggregate_for_environment(upstream_env, per_episode) == {"avg_tool_calls": 1.0, "episodes": 2}


def test_upstream_env_is_usable_through_the_async_hooks(upstream_env):
    import asyncio

    env = make(upstream_env)

    async def episode():
        await env.init_async([{"role": "user", "content": "?"}])
        out = await env.step_async("<answer>41</answer>")
        await env.close_async()
        return out

    out = asyncio.run(episode())
    assert (out["reward"], out["done"]) == (0.0, True)
    assert env.closed
