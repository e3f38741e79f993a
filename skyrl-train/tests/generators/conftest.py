"""Test doubles for the generator tests: a scripted engine, scripted envs and a config builder.

The engine returns predetermined token ids (a deterministic stand-in for the model's choices); the tokenizer
and chat template are SmolLM2's real ones, so every expected token id below is what training would see.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_train.config import build_config
from skyrl_train.config.schema import GeneratorConfig, SkyRLGymConfig
from skyrl_train.generators.base import GeneratorInput, TrajectoryID
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.inference_engines.base import InferenceEngineInput, InferenceEngineInterface, InferenceEngineOutput
from skyrl_train.models import DEFAULT_MODEL, load_tokenizer

EOS = 2
"""SmolLM2's `<|im_end|>`."""

SYNC_ENV = "test_scripted"
ASYNC_ENV = "test_scripted_async"

RELEASE_BLOCKED_STEPS = threading.Event()
"""Sync env steps with `block_step` wait on this; set at teardown so no pool thread outlives a test."""


@dataclass
class Reply:
    """One scripted engine reply. In a script, a plain list of ids stands for `Reply(ids)`."""

    ids: list[int]
    logprobs: list[float] | None = None
    """Defaults to -0.1, -0.2, ... per token."""
    stop_reason: str = "stop"
    delay: float = 0.0
    error: Exception | None = None
    """Raised instead of replying (after `delay`)."""
    weight_version: int | None = None
    """Reported as the weight version that generated the reply (None: the engine does not report one)."""
    retokenized: bool = False
    """Reported as re-encoded from text (a text-only remote server)."""


class ScriptedEngine(InferenceEngineInterface):
    """Replies from a script: a list (consumed by calls in order) or a dict session_id -> list. Each item is a
    list of ids or a dict of `Reply` fields. Records every call in `calls`."""

    def __init__(self, tokenizer, script: list | dict[str, list]):
        self.tokenizer = tokenizer
        self.script = script
        self.calls: list[InferenceEngineInput] = []

    async def generate(self, input_batch: InferenceEngineInput) -> InferenceEngineOutput:
        self.calls.append(input_batch)
        session_ids = input_batch.get("session_ids")
        queue = self.script if isinstance(self.script, list) else self.script[session_ids[0]]
        item = queue.pop(0)
        reply = Reply(**item) if isinstance(item, dict) else Reply(list(item))
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.error is not None:
            raise reply.error
        logprobs = reply.logprobs if reply.logprobs is not None else [-0.1 * (i + 1) for i in range(len(reply.ids))]
        want_logprobs = input_batch["sampling_params"].logprobs is not None
        return InferenceEngineOutput(
            responses=[self.tokenizer.decode(reply.ids, skip_special_tokens=True)],
            response_ids=[list(reply.ids)],
            stop_reasons=[reply.stop_reason],
            response_logprobs=[logprobs] if want_logprobs else None,
            weight_versions=[reply.weight_version],
            retokenized=[reply.retokenized],
        )


class ScriptedEnv(BaseTextEnv):
    """Steps through `extras["script"]` (a list of step outputs). Failure injection through extras:
    `fail_in` ("make" | "init" | "step:<turn>"), `step_sleep` (seconds), `block_step` (sync: wait on
    RELEASE_BLOCKED_STEPS); `system_prompt` makes init prepend a system message. Every instance is recorded
    in `instances`."""

    instances: list[ScriptedEnv] = []

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        self.extras = dict(extras or {})
        if self.extras.get("fail_in") == "make":
            raise RuntimeError("cannot reach the env server")
        self.env_config = env_config
        self.script = list(self.extras.get("script", []))
        self.max_turns = self.extras["max_turns"]
        self.actions: list[str] = []
        self.threads: dict[str, str] = {}
        self.close_calls = 0
        self._count_close_calls()
        ScriptedEnv.instances.append(self)

    def _count_close_calls(self) -> None:
        """Count calls of the close hook the generator uses, before `Env`'s idempotency wrapper can hide a
        second one, by shadowing it with an instance attribute."""
        hook = "close_async" if skyrl_gym.implements_async(self, "close") else "close"
        close = getattr(self, hook)

        def counted():
            self.close_calls += 1
            return close()

        setattr(self, hook, counted)

    def _record(self, hook: str) -> None:
        self.threads[hook] = threading.current_thread().name

    def _init(self, prompt):
        self._record("init")
        if self.extras.get("fail_in") == "init":
            raise RuntimeError("env init failed")
        if "system_prompt" in self.extras:
            prompt = [{"role": "system", "content": self.extras["system_prompt"]}, *prompt]
        return prompt, {}

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        self._record("step")
        self.actions.append(action)
        self.turns += 1
        if self.extras.get("fail_in") == f"step:{self.turns}":
            raise ConnectionError("tool server crashed")
        return BaseTextEnvStepOutput(**self.script[self.turns - 1])

    def init(self, prompt):
        return self._init(prompt)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.extras.get("block_step"):
            RELEASE_BLOCKED_STEPS.wait(timeout=30)
        time.sleep(self.extras.get("step_sleep", 0))
        return self._step(action)

    def close(self) -> None:
        self._record("close")

    def get_metrics(self) -> dict[str, Any]:
        return {"turns": self.turns}


class AsyncScriptedEnv(ScriptedEnv):
    """The same env through the async hooks (awaited directly by the generator)."""

    async def init_async(self, prompt):
        return self._init(prompt)

    async def step_async(self, action: str) -> BaseTextEnvStepOutput:
        await asyncio.sleep(self.extras.get("step_sleep", 0))
        return self._step(action)

    async def close_async(self) -> None:
        self._record("close")


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2-135M-Instruct's real tokenizer and chat template."""
    return load_tokenizer(DEFAULT_MODEL)


@pytest.fixture(autouse=True)
def scripted_envs():
    """Register the test envs for one test; afterwards release blocked steps and forget the instances."""
    RELEASE_BLOCKED_STEPS.clear()
    ScriptedEnv.instances.clear()
    skyrl_gym.register(SYNC_ENV, ScriptedEnv)
    skyrl_gym.register(ASYNC_ENV, AsyncScriptedEnv)
    yield ScriptedEnv.instances
    RELEASE_BLOCKED_STEPS.set()
    skyrl_gym.deregister(SYNC_ENV)
    skyrl_gym.deregister(ASYNC_ENV)


@pytest.fixture
def make_generator(tokenizer):
    """Factory: `make_generator(script, max_env_workers=4, env_configs={}, **generator_overrides)` returns
    `(generator, engine)`; `env_configs` are the per-env blocks of `environment.skyrl_gym`."""

    def make(script, max_env_workers: int = 4, env_configs: dict | None = None, **overrides):
        engine = ScriptedEngine(tokenizer, script)
        skyrl_gym_cfg = SkyRLGymConfig(max_env_workers=max_env_workers, env_configs=env_configs or {})
        return SkyRLGymGenerator(_generator_cfg(**overrides), skyrl_gym_cfg, engine, tokenizer), engine

    return make


@pytest.fixture
def step():
    """`step(reward=0.0, done=False, observation=None)`: one scripted env step output."""

    def make(reward: float = 0.0, done: bool = False, observation: str | None = None) -> dict[str, Any]:
        observations = [] if observation is None else [{"role": "user", "content": observation}]
        return {"observations": observations, "reward": reward, "done": done, "metadata": {}}

    return make


@pytest.fixture
def batch():
    """`batch(script, env_class=SYNC_ENV, n=1, prompt="What is 2+2?", **extras)`: a GeneratorInput of `n`
    identical rows with trajectory ids q_0, q_1, ...; `extras` go to every row's env_extras."""

    def make(script=(), env_class: str = SYNC_ENV, n: int = 1, prompt: str = "What is 2+2?", **extras):
        return GeneratorInput(
            prompts=[[{"role": "user", "content": prompt}] for _ in range(n)],
            env_classes=[env_class] * n,
            env_extras=[{"script": list(script), **extras} for _ in range(n)],
            trajectory_ids=[TrajectoryID("q", i) for i in range(n)],
        )

    return make


@pytest.fixture
def generator_cfg():
    """`generator_cfg(**overrides)`: the `generator` section (a DictConfig) with every key the generator reads."""
    return _generator_cfg


def _generator_cfg(**overrides) -> GeneratorConfig:
    """The typed `generator` section for these tests; `overrides` may be dotted ('sampling_params.top_k')."""
    values: dict[str, Any] = {
        "max_input_length": 1024,
        "max_turns": 3,
        "sampling_params": {"max_generate_length": 64, "temperature": 1.0, "logprobs": 0},
        "trajectory_timeout_seconds": 0,
    }
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        block = values
        for parent in parents:
            block = block.setdefault(parent, {})
        block[leaf] = value
    return build_config({"generator": values}).generator
