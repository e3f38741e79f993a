"""SFT's tokenisation of a conversation equals, token for token, what the generator builds for the same episode.

The episode is real: a tiny model is fine-tuned (`PolicyWorker.sft_train`) on one tool conversation until it predicts
every assistant token, then the real generator runs it greedily through the real hf engine against a tool env (calls
in the `<tool_call>` format, answers as `tool` messages). The conversation the generator reports for that episode,
encoded by `ConversationEncoder`, gives the generator's prompt ids, response ids and loss mask exactly.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import torch

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_train.config import build_config
from skyrl_train.config.schema import SkyRLGymConfig
from skyrl_train.generators.base import GeneratorInput, TrajectoryID
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.inference_engines.hf.engine import HFInferenceEngine
from skyrl_train.sft.conversations import read_conversations
from skyrl_train.sft.encoding import ConversationEncoder, collate
from skyrl_train.workers import PolicyWorker

from .conftest import TOOL_CONVERSATION, write_jsonl

TOOL_ENV = "sft_test_price_tool"
PRICES = {"AAPL": "187.5"}
MAX_SFT_STEPS = 150


class PriceToolEnv(BaseTextEnv):
    """Opens with a system message; a reply holding a `<tool_call>` to get_price gets the price as a `tool` message, a
    reply without a call ends the episode (reward 1 if it states the price)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        self.max_turns = 3

    def init(self, prompt):
        return [TOOL_CONVERSATION[0], *prompt], {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        call = re.search(r"<tool_call>(.*?)</tool_call>", action, re.DOTALL)
        if call is None or self.turns >= self.max_turns:
            return BaseTextEnvStepOutput(observations=[], reward=float("187.5" in action), done=True, metadata={})
        ticker = json.loads(call.group(1))["arguments"]["ticker"]
        return BaseTextEnvStepOutput(
            observations=[{"role": "tool", "content": PRICES[ticker]}], reward=0.0, done=False, metadata={}
        )


@pytest.fixture
def tool_env():
    skyrl_gym.register(TOOL_ENV, PriceToolEnv)
    yield TOOL_ENV
    skyrl_gym.deregister(TOOL_ENV)


@pytest.fixture
def trained_policy(tiny_model, tiny_tokenizer, tmp_path):  # noqa: F811
    """The tiny model fine-tuned on `TOOL_CONVERSATION` until every assistant token is its top-1 prediction."""
    cfg = build_config(
        {"trainer": {"policy": {"model": {"path": tiny_model}, "optimizer_config": {"lr": 1e-2, "weight_decay": 0.0}}}}
    )
    torch.manual_seed(0)
    policy = PolicyWorker(cfg.trainer.policy, cfg.trainer.algorithm, num_training_steps=MAX_SFT_STEPS)
    (row,) = read_conversations(str(write_jsonl(tmp_path / "demo.jsonl", [{"messages": TOOL_CONVERSATION}])))
    batch = collate([ConversationEncoder(tiny_tokenizer).encode(row.messages)], tiny_tokenizer.pad_token_id)
    losses = []
    for _ in range(MAX_SFT_STEPS):
        metrics = policy.sft_train(batch, 1)
        losses.append(metrics["loss"])
        if metrics["token_accuracy"] == 1.0:
            break
    assert metrics["token_accuracy"] == 1.0, f"not learned in {MAX_SFT_STEPS} steps: losses {losses[::10]}"
    assert losses[-1] < losses[0] / 5
    return policy


async def test_sft_tokens_of_a_tool_episode_equal_the_generators(
    trained_policy, tiny_tokenizer, tool_env
):  # noqa: F811
    generator_cfg = build_config(
        {
            "generator": {
                "max_turns": 3,
                "max_input_length": 1024,
                "sampling_params": {"temperature": 0.0, "max_generate_length": 48},
                "trajectory_timeout_seconds": 0,
            }
        }
    ).generator
    engine = HFInferenceEngine(trained_policy.model, tiny_tokenizer, seed=0)
    generator = SkyRLGymGenerator(generator_cfg, SkyRLGymConfig(max_env_workers=0), engine, tiny_tokenizer)
    try:
        output = await generator.generate(
            GeneratorInput(
                prompts=[[TOOL_CONVERSATION[1]]],
                env_classes=[tool_env],
                env_extras=[{}],
                trajectory_ids=[TrajectoryID("q", 0)],
            )
        )
    finally:
        await engine.teardown()
    episode = output["conversations"][0]
    messages = [*episode.prompt, *episode.response]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2]["content"] == '<tool_call>{"name": "get_price", "arguments": {"ticker": "AAPL"}}</tool_call>'
    assert output["rewards"][0][-1] == 1.0  # the episode ran: the final reply states the price the tool returned

    example = ConversationEncoder(tiny_tokenizer).encode(messages)
    assert example.prompt_ids == output["prompt_token_ids"][0]
    assert example.response_ids == output["response_ids"][0]
    assert example.loss_mask == output["loss_masks"][0]
