"""`mcp_tool` episodes driven by `SkyRLGymGenerator`: with the real HF engine on the tiny random model, and with
scripted model replies (exact token ids) to reach the crash and timeout paths the random model never takes."""

from __future__ import annotations

import json

import pytest

from skyrl_train.config.schema import GeneratorConfig, SkyRLGymConfig
from skyrl_train.generators.base import GeneratorInput, TrajectoryID
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.inference_engines.base import (
    InferenceEngineInput,
    InferenceEngineInterface,
    InferenceEngineOutput,
    SamplingParams,
)
from skyrl_train.inference_engines.hf.engine import HFInferenceEngine
from skyrl_train.models import load_causal_lm
from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401

TRUTH = {
    "task_id": "toy-0001",
    "max_turns": 3,
    "success": {"must_call_tool": True, "expected_answer": "5", "answer_match": "numeric"},
    "tool_sequence": [{"step": 1, "server": "toy", "tool": "add", "params": {"a": 2, "b": 3}}],
}
QUESTION = [{"role": "user", "content": "What is 2 + 3?"}]


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class ScriptedReplies(InferenceEngineInterface):
    """Stands in for the model: replies with the encoded texts of `script[session_id]`, in order, ending in EOS."""

    def __init__(self, tokenizer, script: dict[str, list[str]]):
        self.tokenizer = tokenizer
        self.script = {session: list(texts) for session, texts in script.items()}

    async def generate(self, input_batch: InferenceEngineInput) -> InferenceEngineOutput:
        text = self.script[input_batch["session_ids"][0]].pop(0)
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return InferenceEngineOutput(
            responses=[text], response_ids=[ids], stop_reasons=["stop"], response_logprobs=[[-0.5] * len(ids)]
        )


@pytest.fixture
def run(toy_spec, tiny_tokenizer):  # noqa: F811
    """`run(engine, n)`: generate `n` mcp_tool trajectories of QUESTION (ids q_0..q_n-1) against the toy server."""

    async def generate(engine: InferenceEngineInterface, n: int):
        mcp_config = {"servers": [{"name": "toy", "command": list(toy_spec().command)}], "call_timeout_s": 1}
        generator = SkyRLGymGenerator(
            GeneratorConfig(
                max_input_length=4096,
                max_turns=3,
                sampling_params=SamplingParams(max_generate_length=16),
                trajectory_timeout_seconds=120,
            ),
            SkyRLGymConfig(max_env_workers=2, env_configs={"mcp_tool": mcp_config}),
            engine,
            tiny_tokenizer,
        )
        return await generator.generate(
            GeneratorInput(
                prompts=[QUESTION] * n,
                env_classes=["mcp_tool"] * n,
                env_extras=[{"reward_spec": {"ground_truth": TRUTH}, "extra_info": {"servers": ["toy"]}}] * n,
                trajectory_ids=[TrajectoryID("q", i) for i in range(n)],
            )
        )

    return generate


async def test_tiny_model_episodes_finish_with_env_metrics(run, tiny_model, tiny_tokenizer):  # noqa: F811
    engine = HFInferenceEngine(load_causal_lm(tiny_model), tiny_tokenizer, seed=0)
    try:
        out = await run(engine, 2)
    finally:
        await engine.teardown()
    metrics = out["rollout_metrics"]
    assert set(out["stop_reasons"]) <= {"stop", "length"}
    assert metrics["generate/tool_server_failures"] == 0
    assert 1.0 <= metrics["environment/mcp_tool/turns"] <= 3.0
    assert metrics["environment/mcp_tool/reward"] == 0.0  # the random model never calls `add`
    assert all(m["server_crashes"] == 0 and m["tool_server_failed"] == 0 for m in out["env_metrics"])


async def test_a_crash_marks_the_trajectory_as_an_infra_failure(run, tiny_tokenizer):  # noqa: F811
    script = {"q_0": [call("crash"), call("add", a=2, b=3), "5"]}
    out = await run(ScriptedReplies(tiny_tokenizer, script), 1)
    assert out["stop_reasons"] == ["tool_server_failed"]
    assert set(out["loss_masks"][0]) == {0}
    assert out["rewards"][0][-1] == 1.0  # the restarted server answered the retry: the episode itself succeeded
    assert out["rollout_metrics"]["generate/tool_server_failures"] == 1
    assert out["env_metrics"][0]["server_crashes"] == 1


async def test_a_tool_timeout_is_a_tool_error_not_an_infra_failure(run, tiny_tokenizer):  # noqa: F811
    script = {"q_0": [call("sleep", seconds=30), call("add", a=2, b=3), "5"]}
    out = await run(ScriptedReplies(tiny_tokenizer, script), 1)
    assert out["stop_reasons"] == ["stop"]
    assert 1 in out["loss_masks"][0]
    metrics = out["rollout_metrics"]
    assert (metrics["generate/tool_server_failures"], metrics["environment/mcp_tool/tool_timeouts"]) == (0, 1.0)
    assert (metrics["environment/mcp_tool/success"], metrics["environment/mcp_tool/reward"]) == (1.0, 1.0)
