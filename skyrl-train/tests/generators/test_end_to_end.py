"""End to end: the real HF engine (tiny random model, SmolLM2 tokenizer) and the real gsm8k_multi_turn env."""

from __future__ import annotations

from collections import defaultdict

import pytest

from skyrl_gym.envs.gsm8k_multi_turn.env import FINAL_NUDGE
from skyrl_train.config.schema import SkyRLGymConfig
from skyrl_train.generators.base import GeneratorInput, TrajectoryID
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.inference_engines.base import InferenceEngineInterface
from skyrl_train.inference_engines.hf.engine import HFInferenceEngine
from skyrl_train.models import load_causal_lm
from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401

MAX_TOKENS = 8


class RecordingEngine(InferenceEngineInterface):
    """Passes calls through to a real engine and keeps, per session, the (prompt ids, response ids) of each call."""

    def __init__(self, engine: InferenceEngineInterface):
        self.engine = engine
        self.calls: dict[str, list[tuple[list[int], list[int]]]] = defaultdict(list)

    async def generate(self, input_batch):
        output = await self.engine.generate(input_batch)
        call = (input_batch["prompt_token_ids"][0], output["response_ids"][0])
        self.calls[input_batch["session_ids"][0]].append(call)
        return output


@pytest.fixture
async def engine(tiny_model, tiny_tokenizer):  # noqa: F811
    hf_engine = HFInferenceEngine(load_causal_lm(tiny_model), tiny_tokenizer, seed=0)
    yield RecordingEngine(hf_engine)
    await hf_engine.teardown()


@pytest.fixture
async def two_turn_rollout(engine, tiny_tokenizer, generator_cfg):  # noqa: F811
    """Two gsm8k_multi_turn trajectories of at most 2 turns, 8 sampled tokens per turn."""
    cfg = generator_cfg(max_turns=2, **{"sampling_params.max_generate_length": MAX_TOKENS})
    generator = SkyRLGymGenerator(cfg, SkyRLGymConfig(max_env_workers=2), engine, tiny_tokenizer)
    question = [{"role": "user", "content": "Tom has 2 apples and buys 2 more. How many apples does he have?"}]
    output = await generator.generate(
        GeneratorInput(
            prompts=[question, question],
            env_classes=["gsm8k_multi_turn"] * 2,
            env_extras=[{"reward_spec": {"ground_truth": "4"}}] * 2,
            trajectory_ids=[TrajectoryID("0", 0), TrajectoryID("0", 1)],
        )
    )
    return output, engine.calls


async def test_rows_are_consistent(two_turn_rollout):
    out, _ = two_turn_rollout
    for response, mask, logprobs, rewards in zip(
        out["response_ids"], out["loss_masks"], out["rollout_logprobs"], out["rewards"], strict=True
    ):
        assert len(response) == len(mask) == len(logprobs) == len(rewards)
        assert all(lp < 0 for lp, m in zip(logprobs, mask, strict=True) if m)
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)
    assert set(out["stop_reasons"]) <= {"stop", "length"}


async def test_response_is_exactly_the_sampled_tokens_and_the_templated_nudge(two_turn_rollout, tokenizer):
    # The random model never answers "#### 4", so every trajectory takes both turns.
    out, calls = two_turn_rollout
    nudge = tokenizer.encode(
        f"\n<|im_start|>user\n{FINAL_NUDGE}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    rows = zip(out["trajectory_ids"], out["prompt_token_ids"], out["response_ids"], out["loss_masks"], strict=True)
    for trajectory_id, prompt, response, mask in rows:
        (prompt_1, first), (prompt_2, second) = calls[trajectory_id.to_string()]
        assert (prompt_1, prompt_2) == (prompt, prompt + first + nudge)
        assert response == first + nudge + second
        assert mask == [1] * len(first) + [0] * len(nudge) + [1] * len(second)


async def test_env_metrics_are_aggregated_by_the_env_class(two_turn_rollout):
    out, _ = two_turn_rollout
    assert out["rollout_metrics"]["environment/gsm8k_multi_turn/avg_steps"] == 2.0
