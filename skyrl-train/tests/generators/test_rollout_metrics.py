"""`get_rollout_metrics` (one definition shared by train and eval) and the metrics `generate()` reports."""

from __future__ import annotations

import asyncio
import logging

import pytest

from skyrl_train.generators.utils import GenerationProgress, get_rollout_metrics

EOS = 2
FOUR = [1589, 314, 216, 36, 30]
"""It is 4."""


def counters(empty=0, init=0, step=0, timeout=0, tool_server=0, **env_metrics):
    return {
        **env_metrics,
        "empty_responses": empty,
        "env_init_failed": init,
        "env_step_failed": step,
        "trajectory_timeout": timeout,
        "tool_server_failed": tool_server,
    }


def test_rollout_metrics_of_a_mixed_batch(scripted_envs):
    # Rows: two finished test_scripted episodes (turns 1 and 3), one test_scripted init failure, one
    # test_scripted_async timeout. Response lengths 2, 4, 1, 1.
    metrics = get_rollout_metrics(
        response_ids=[[5, EOS], [5, 6, 7, EOS], [EOS], [EOS]],
        stop_reasons=["stop", "length", "env_init_failed", "timeout"],
        env_classes=["test_scripted", "test_scripted", "test_scripted", "test_scripted_async"],
        env_metrics=[counters(empty=1, turns=1), counters(empty=2, turns=3), counters(init=1), counters(timeout=1)],
    )
    assert metrics == {
        "generate/min_num_tokens": 1,
        "generate/max_num_tokens": 4,
        "generate/avg_num_tokens": 2.0,
        "generate/std_num_tokens": pytest.approx(1.224744871391589),  # population std of 2, 4, 1, 1
        "generate/stop_reason/stop": 1,
        "generate/stop_reason/length": 1,
        "generate/stop_reason/env_init_failed": 1,
        "generate/stop_reason/timeout": 1,
        "generate/empty_responses": 3,
        "generate/env_init_failures": 1,
        "generate/env_step_failures": 0,
        "generate/trajectory_timeouts": 1,
        "generate/tool_server_failures": 0,
        "generate/user_simulator_failures": 0,
        "generate/engine_failures": 0,
        "generate/retokenized_turns": 0,
        "generate/special_token_messages": 0,
        "environment/test_scripted/empty_responses": 3,
        "environment/test_scripted/env_init_failures": 1,
        "environment/test_scripted/env_step_failures": 0,
        "environment/test_scripted/trajectory_timeouts": 0,
        "environment/test_scripted/tool_server_failures": 0,
        "environment/test_scripted/user_simulator_failures": 0,
        "environment/test_scripted/engine_failures": 0,
        "environment/test_scripted/retokenized_turns": 0,
        "environment/test_scripted/special_token_messages": 0,
        "environment/test_scripted_async/empty_responses": 0,
        "environment/test_scripted_async/env_init_failures": 0,
        "environment/test_scripted_async/env_step_failures": 0,
        "environment/test_scripted_async/trajectory_timeouts": 1,
        "environment/test_scripted_async/tool_server_failures": 0,
        "environment/test_scripted_async/user_simulator_failures": 0,
        "environment/test_scripted_async/engine_failures": 0,
        "environment/test_scripted_async/retokenized_turns": 0,
        "environment/test_scripted_async/special_token_messages": 0,
        "environment/test_scripted/turns": 2.0,  # mean over the two episodes whose env ran
    }


def test_env_metrics_use_the_env_classes_own_aggregator():
    # gsm8k_multi_turn aggregates its per-episode `steps` into `avg_steps`.
    metrics = get_rollout_metrics(
        response_ids=[[EOS], [EOS]],
        stop_reasons=["stop", "stop"],
        env_classes=["gsm8k_multi_turn", "gsm8k_multi_turn"],
        env_metrics=[counters(steps=1), counters(steps=4)],
    )
    assert metrics["environment/gsm8k_multi_turn/avg_steps"] == 2.5
    assert "environment/gsm8k_multi_turn/steps" not in metrics


def test_infra_failures_are_left_out_of_env_aggregation():
    metrics = get_rollout_metrics(
        response_ids=[[EOS], [EOS]],
        stop_reasons=["stop", "env_step_failed"],
        env_classes=["gsm8k", "gsm8k"],
        env_metrics=[counters(score=1.0), counters(step=1, score=0.0)],
    )
    assert metrics["environment/gsm8k/score"] == 1.0
    assert metrics["generate/env_step_failures"] == 1


async def test_generate_reports_rollout_metrics(make_generator, batch, step):
    generator, _ = make_generator([FOUR + [EOS], [EOS]])
    out = await generator.generate(batch(script=[step(1.0, done=True)], n=2))
    metrics = out["rollout_metrics"]
    assert (metrics["generate/min_num_tokens"], metrics["generate/max_num_tokens"]) == (1, 6)
    assert metrics["generate/avg_num_tokens"] == 3.5
    assert metrics["generate/empty_responses"] == 1
    assert metrics["environment/test_scripted/empty_responses"] == 1
    assert metrics["environment/test_scripted/turns"] == 1.0
    assert metrics["generate/stop_reason/stop"] == 2


async def test_env_metrics_are_the_envs_plus_generator_counters(make_generator, batch, step):
    generator, _ = make_generator([FOUR + [EOS]])
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert out["env_metrics"] == [
        {
            "turns": 1,
            "empty_responses": 0,
            "env_init_failed": 0,
            "env_step_failed": 0,
            "trajectory_timeout": 0,
            "tool_server_failed": 0,
            "user_simulator_failed": 0,
            "engine_failed": 0,
            "retokenized_turns": 0,
            "special_token_messages": 0,
        }
    ]


def test_generation_progress_logs_at_most_every_interval_and_at_the_end(caplog):
    now = [0.0]
    progress = GenerationProgress(
        4, "generate (eval, step 3)", tokens_of=len, terminal=False, interval_s=30.0, clock=lambda: now[0]
    )
    loop = asyncio.new_event_loop()
    tasks = [loop.create_future() for _ in range(4)]
    tasks[0].set_result([1, 2, 3])
    tasks[1].set_result([1] * 59)
    tasks[2].set_exception(RuntimeError("engine died"))  # a failed trajectory sampled nothing
    tasks[3].cancel()
    with caplog.at_level(logging.INFO, logger="skyrl_train.generators.utils"):
        for t, task in zip((10.0, 31.0, 40.0, 45.0), tasks, strict=True):
            now[0] = t
            progress.finished_one(task)
    loop.close()
    assert [r.getMessage() for r in caplog.records] == [
        "generate (eval, step 3): 2/4 trajectories done (31 s, 2.0 tokens/s, ETA 31 s)",
        "generate (eval, step 3): 4/4 trajectories done (45 s, 1.4 tokens/s)",
    ]
