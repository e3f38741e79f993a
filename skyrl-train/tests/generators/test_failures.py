"""Infrastructure failures (env init, env step, trajectory timeout) become stop reasons, never crashes, and
the env is closed exactly once on every path."""

from __future__ import annotations

import time

import pytest

from skyrl_gym import InfraFailure, InfraFailureReason

PROMPT_LEN = 37
"""Length of the templated "What is 2+2?" prompt."""
EOS = 2
THREE = [57, 1510, 216, 35, 30]
"""I think 3."""
FOUR = [1589, 314, 216, 36, 30]
"""It is 4."""
OBS_TRY = [198, 1, 4093, 198, 20011, 1163, 30, 2, 198, 1, 520, 9531, 198]
"""\\n<|im_start|>user\\nTry again.<|im_end|>\\n<|im_start|>assistant\\n"""


async def test_env_make_failure_gives_a_placeholder(make_generator, batch):
    generator, engine = make_generator([])
    out = await generator.generate(batch(fail_in="make"))
    assert engine.calls == []
    assert out["stop_reasons"] == ["env_init_failed"]
    assert (out["response_ids"], out["loss_masks"], out["rollout_logprobs"]) == ([[EOS]], [[0]], [[0.0]])
    assert out["rewards"] == [[0.0]]
    assert len(out["prompt_token_ids"][0]) == PROMPT_LEN


async def test_unknown_env_class_gives_a_placeholder(make_generator, batch):
    generator, _ = make_generator([])
    out = await generator.generate(batch(env_class="no_such_env"))
    assert out["stop_reasons"] == ["env_init_failed"]
    assert out["rollout_metrics"]["environment/no_such_env/env_init_failures"] == 1
    assert out["infra_failures"][0].reason == InfraFailureReason.ENV_INIT_FAILED
    assert "no_such_env" in out["infra_failures"][0].error


@pytest.mark.parametrize("env_class", ["test_scripted", "test_scripted_async"])
async def test_env_init_failure_gives_a_placeholder_and_closes_the_env(make_generator, batch, scripted_envs, env_class):
    generator, engine = make_generator([])
    out = await generator.generate(batch(env_class=env_class, fail_in="init"))
    assert out["stop_reasons"] == ["env_init_failed"]
    assert (out["response_ids"], out["loss_masks"], out["rewards"]) == ([[EOS]], [[0]], [[0.0]])
    assert out["infra_failures"] == [InfraFailure(InfraFailureReason.ENV_INIT_FAILED, "RuntimeError: env init failed")]
    assert out["env_metrics"] == [
        {
            "empty_responses": 0,
            "env_init_failed": 1,
            "env_step_failed": 0,
            "trajectory_timeout": 0,
            "tool_server_failed": 0,
            "user_simulator_failed": 0,
            "engine_failed": 0,
            "retokenized_turns": 0,
            "special_token_messages": 0,
        }
    ]
    assert scripted_envs[0].close_calls == 1


async def test_placeholder_reward_format_matches_the_other_rows(make_generator, batch, step):
    generator, _ = make_generator([FOUR + [EOS]])
    ok = batch(script=[step(1.0, done=True)])
    failed = batch(fail_in="init")
    mixed = {key: ok[key] + failed[key] for key in ("prompts", "env_classes", "env_extras", "trajectory_ids")}
    out = await generator.generate(mixed)
    assert out["rewards"] == [[0.0, 0.0, 0.0, 0.0, 0.0, 1.0], [0.0]]
    assert out["stop_reasons"] == ["stop", "env_init_failed"]


async def test_env_step_failure_keeps_the_turns_but_masks_them(make_generator, batch, step, scripted_envs):
    script = [step(0.5, observation="Try again.")]
    generator, _ = make_generator([THREE + [EOS], FOUR + [EOS]])
    out = await generator.generate(batch(script=script, fail_in="step:2"))
    assert out["stop_reasons"] == ["env_step_failed"]
    assert out["response_ids"] == [THREE + [EOS] + OBS_TRY + FOUR + [EOS]]
    assert out["loss_masks"] == [[0] * 25]
    assert out["rewards"] == [[0.0] * 5 + [0.5] + [0.0] * 19]
    assert out["env_metrics"][0]["env_step_failed"] == 1
    assert out["infra_failures"] == [
        InfraFailure(InfraFailureReason.ENV_STEP_FAILED, "ConnectionError: tool server crashed")
    ]
    assert scripted_envs[0].close_calls == 1


async def test_async_env_step_past_the_budget_times_out(make_generator, batch, step, scripted_envs):
    generator, _ = make_generator([FOUR + [EOS]], trajectory_timeout_seconds=0.3)
    start = time.monotonic()
    out = await generator.generate(batch(script=[step(1.0, done=True)], env_class="test_scripted_async", step_sleep=5))
    assert time.monotonic() - start < 2.5  # the step/engine call alone would take 5 s
    assert out["stop_reasons"] == ["timeout"]
    assert (out["response_ids"], out["loss_masks"], out["rewards"]) == ([[EOS]], [[0]], [[0.0]])
    assert out["env_metrics"][0]["trajectory_timeout"] == 1
    assert out["infra_failures"] == [
        InfraFailure(InfraFailureReason.TIMEOUT, "timed out after generator.trajectory_timeout_seconds=0.3")
    ]
    assert scripted_envs[0].close_calls == 1


async def test_blocked_sync_env_step_still_returns_within_the_budget(make_generator, batch, step, scripted_envs):
    generator, _ = make_generator([FOUR + [EOS]], trajectory_timeout_seconds=0.3, max_env_workers=2)
    start = time.monotonic()
    out = await generator.generate(batch(script=[step(1.0, done=True)], block_step=True))
    assert time.monotonic() - start < 2.5  # the step/engine call alone would take 5 s
    assert out["stop_reasons"] == ["timeout"]
    assert scripted_envs[0].close_calls == 1


async def test_slow_engine_call_times_out(make_generator, batch, step, scripted_envs):
    generator, _ = make_generator([{"ids": FOUR + [EOS], "delay": 5}], trajectory_timeout_seconds=0.3)
    start = time.monotonic()
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert time.monotonic() - start < 2.5  # the step/engine call alone would take 5 s
    assert out["stop_reasons"] == ["timeout"]
    assert scripted_envs[0].close_calls == 1


async def test_budget_covers_the_whole_trajectory_not_each_call(make_generator, batch, step):
    # Three turns of 0.2 s each: every call fits in 0.5 s, the trajectory does not.
    replies = [{"ids": THREE + [EOS], "delay": 0.2}] * 3
    script = [step(0.0, observation="Try again."), step(0.0, observation="Try again."), step(1.0, done=True)]
    generator, _ = make_generator(replies, trajectory_timeout_seconds=0.5)
    out = await generator.generate(batch(script=script))
    assert out["stop_reasons"] == ["timeout"]


async def test_timeout_placeholder_keeps_the_prompt(make_generator, batch, step):
    generator, _ = make_generator([{"ids": FOUR + [EOS], "delay": 5}], trajectory_timeout_seconds=0.2)
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert len(out["prompt_token_ids"][0]) == PROMPT_LEN


@pytest.mark.parametrize("env_class", ["test_scripted", "test_scripted_async"])
async def test_env_is_closed_once_after_a_normal_episode(make_generator, batch, step, scripted_envs, env_class):
    generator, _ = make_generator([FOUR + [EOS]])
    await generator.generate(batch(script=[step(1.0, done=True)], env_class=env_class))
    assert scripted_envs[0].close_calls == 1


async def test_env_is_closed_once_after_a_length_stop(make_generator, batch, step, scripted_envs):
    generator, _ = make_generator([], max_input_length=10)
    await generator.generate(batch(script=[step(1.0, done=True)]))
    assert scripted_envs[0].close_calls == 1


async def test_engine_error_propagates_after_every_env_is_closed(make_generator, batch, step, scripted_envs):
    # Trajectory q_0's engine call fails while q_1 is still waiting for its reply.
    script = {"q_0": [{"ids": [], "error": RuntimeError("engine died")}], "q_1": [{"ids": FOUR + [EOS], "delay": 5}]}
    generator, _ = make_generator(script)
    with pytest.raises(RuntimeError, match="engine died"):
        await generator.generate(batch(script=[step(1.0, done=True)], n=2))
    assert [env.close_calls for env in scripted_envs] == [1, 1]
