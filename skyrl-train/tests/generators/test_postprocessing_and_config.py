"""`zero_reward_on_non_stop`, `apply_overlong_filtering`, `truncated_turn_ends_trajectory`, and the configurations
the generator accepts."""

from __future__ import annotations

import dataclasses

import pytest

from skyrl_train.config.schema import SkyRLGymConfig
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.generators.utils import apply_overlong_filtering, zero_rewards_on_non_stop
from skyrl_train.inference_engines.base import SamplingParams

EOS = 2
FOUR = [1589, 314, 216, 36, 30]
"""It is 4."""


def test_overlong_filtering_zeroes_masks_of_non_stop_rows():
    masks = apply_overlong_filtering([[1, 1], [1, 0, 1], [0]], ["stop", "length", "timeout"])
    assert masks == [[1, 1], [0, 0, 0], [0]]


def test_zero_reward_on_non_stop_handles_token_level_rewards():
    rewards = zero_rewards_on_non_stop([[0.0, 1.0], [0.5, 1.0]], ["stop", "length"])
    assert rewards == [[0.0, 1.0], [0.0, 0.0]]


def test_zero_reward_on_non_stop_handles_scalar_rewards():
    assert zero_rewards_on_non_stop([1.0, 1.0], ["abort", "stop"]) == [0.0, 1.0]


async def test_generator_applies_zero_reward_on_non_stop(make_generator, batch, step):
    generator, _ = make_generator([{"ids": FOUR, "stop_reason": "length"}], zero_reward_on_non_stop=True)
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert out["rewards"] == [[0.0] * 5]
    assert out["rollout_metrics"]["generate/stop_reason/length"] == 1


async def test_generator_applies_overlong_filtering(make_generator, batch, step):
    generator, _ = make_generator([{"ids": FOUR, "stop_reason": "length"}], apply_overlong_filtering=True)
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert out["loss_masks"] == [[0] * 5]
    assert out["rewards"] == [[0.0] * 4 + [1.0]]


@pytest.mark.parametrize("ends", [False, True])
async def test_truncated_turn_ends_trajectory(make_generator, batch, step, scripted_envs, ends):
    script = [{"ids": FOUR, "stop_reason": "length"}, FOUR + [EOS]]
    generator, engine = make_generator(script, truncated_turn_ends_trajectory=ends)
    out = await generator.generate(batch(script=[step(0.0, observation="go on"), step(1.0, done=True)]))
    if ends:  # the cut text never reaches the env, and the trajectory has the cut turn's tokens and no reward
        assert (scripted_envs[0].actions, len(engine.calls), out["stop_reasons"]) == ([], 1, ["length"])
        assert (out["response_ids"], out["rewards"]) == ([FOUR], [[0.0] * 5])
    else:
        assert (scripted_envs[0].actions, out["stop_reasons"]) == (["It is 4.", "It is 4."], ["stop"])
        assert out["rewards"][0][-1] == 1.0


async def test_batch_sampling_params_override_the_config(make_generator, batch, step):
    generator, engine = make_generator([FOUR + [EOS]])
    await generator.generate({**batch(script=[step(1.0, done=True)]), "sampling_params": SamplingParams(temperature=0)})
    assert engine.calls[0]["sampling_params"].temperature == 0


async def test_config_sampling_params_are_used_by_default(make_generator, batch, step):
    generator, engine = make_generator([FOUR + [EOS]], **{"sampling_params.top_k": 5, "sampling_params.seed_x": 1})
    await generator.generate(batch(script=[step(1.0, done=True)]))
    params = engine.calls[0]["sampling_params"]
    assert (params.top_k, params.additional_kwargs) == (5, {"seed_x": 1})


def test_custom_chat_template_is_rejected_naming_the_key(tokenizer, generator_cfg):
    cfg = generator_cfg(**{"chat_template.name_or_path": "qwen3_with_thinking"})
    with pytest.raises(NotImplementedError, match=r"generator\.chat_template"):
        SkyRLGymGenerator(cfg, SkyRLGymConfig(max_env_workers=0), None, tokenizer)


async def test_batched_mode_gives_one_reward_per_response(make_generator, batch, step):
    generator, _ = make_generator([FOUR + [EOS]], batched=True)
    out = await generator.generate(batch(script=[step(0.75, done=True)]))
    assert (out["response_ids"], out["rewards"], out["loss_masks"]) == ([FOUR + [EOS]], [0.75], [[1] * 6])


def test_step_wise_requires_multi_turn_conversations(tokenizer, generator_cfg):
    cfg = generator_cfg(step_wise_trajectories=True, use_conversation_multi_turn=False)
    with pytest.raises(ValueError, match=r"generator\.use_conversation_multi_turn"):
        SkyRLGymGenerator(cfg, SkyRLGymConfig(max_env_workers=0), None, tokenizer)


def test_typed_config_sections_work(tokenizer):
    from skyrl_train.config.schema import GeneratorConfig

    cfg = dataclasses.replace(GeneratorConfig(), max_input_length=512, trajectory_timeout_seconds=0)
    generator = SkyRLGymGenerator(cfg, SkyRLGymConfig(max_env_workers=2), None, tokenizer)
    assert (generator.max_input_length, generator.default_sampling_params.max_generate_length) == (512, 1024)
