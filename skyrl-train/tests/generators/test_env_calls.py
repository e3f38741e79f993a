"""Where env calls run (awaited on the event loop, or in the bounded env thread pool), what the env is given,
and that trajectories run concurrently."""

from __future__ import annotations

import threading
import time

from .test_failures import EOS, FOUR, OBS_TRY, THREE


async def test_async_env_hooks_are_awaited_on_the_event_loop(make_generator, batch, step, scripted_envs):
    generator, _ = make_generator([FOUR + [EOS]])
    await generator.generate(batch(script=[step(1.0, done=True)], env_class="test_scripted_async"))
    loop_thread = threading.current_thread().name
    assert scripted_envs[0].threads == {"init": loop_thread, "step": loop_thread, "close": loop_thread}


async def test_sync_env_calls_run_in_the_env_pool(make_generator, batch, step, scripted_envs):
    generator, _ = make_generator([FOUR + [EOS]])
    await generator.generate(batch(script=[step(1.0, done=True)]))
    assert {hook: name.startswith("skyrl-env") for hook, name in scripted_envs[0].threads.items()} == {
        "init": True,
        "step": True,
        "close": True,
    }


async def test_zero_env_workers_runs_sync_env_calls_inline(make_generator, batch, step, scripted_envs):
    generator, _ = make_generator([FOUR + [EOS]], max_env_workers=0)
    await generator.generate(batch(script=[step(1.0, done=True)]))
    loop_thread = threading.current_thread().name
    assert set(scripted_envs[0].threads.values()) == {loop_thread}


async def test_trajectories_run_concurrently(make_generator, batch, step):
    # 4 trajectories, each 0.4 s of engine time and 0.4 s of (async) env time: ~0.8 s together, 3.2 s in sequence.
    generator, _ = make_generator({f"q_{i}": [{"ids": FOUR + [EOS], "delay": 0.4}] for i in range(4)})
    start = time.monotonic()
    out = await generator.generate(
        batch(script=[step(1.0, done=True)], env_class="test_scripted_async", n=4, step_sleep=0.4)
    )
    assert time.monotonic() - start < 2.0
    assert out["stop_reasons"] == ["stop"] * 4


async def test_sync_env_steps_run_in_parallel_threads(make_generator, batch, step):
    # 4 steps of 0.5 s on 4 threads: ~0.5 s together, 2 s in sequence.
    generator, _ = make_generator([FOUR + [EOS]] * 4, max_env_workers=4)
    start = time.monotonic()
    await generator.generate(batch(script=[step(1.0, done=True)], n=4, step_sleep=0.5))
    assert time.monotonic() - start < 1.4


async def test_outputs_keep_the_input_order(make_generator, batch, step):
    # q_0 finishes last, q_2 first.
    script = {
        "q_0": [{"ids": [57, EOS], "delay": 0.3}],
        "q_1": [{"ids": [58, EOS], "delay": 0.2}],
        "q_2": [{"ids": [59, EOS], "delay": 0.0}],
    }
    generator, _ = make_generator(script)
    out = await generator.generate(batch(script=[step(1.0, done=True)], n=3))
    assert out["response_ids"] == [[57, EOS], [58, EOS], [59, EOS]]
    assert [tid.to_string() for tid in out["trajectory_ids"]] == ["q_0", "q_1", "q_2"]


async def test_env_gets_max_turns_and_its_config_block(make_generator, batch, step, scripted_envs):
    generator, _ = make_generator([FOUR + [EOS]], env_configs={"test_scripted": {"api_url": "http://x"}}, max_turns=7)
    await generator.generate(batch(script=[step(1.0, done=True)], max_turns=2, data_source="d"))
    env = scripted_envs[0]
    assert (env.max_turns, env.extras["data_source"], env.env_config.api_url) == (7, "d", "http://x")


async def test_env_init_can_rewrite_the_prompt(make_generator, batch, step, tokenizer):
    generator, _ = make_generator([FOUR + [EOS]])
    out = await generator.generate(batch(script=[step(1.0, done=True)], system_prompt="Answer briefly."))
    assert tokenizer.decode(out["prompt_token_ids"][0]) == (
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


async def test_an_env_that_never_ends_is_stopped_after_max_turns(make_generator, batch, step):
    # The scripted env ignores max_turns: the generator's turn count ends the episode after turn 2.
    generator, engine = make_generator([THREE + [EOS]] * 3, max_turns=2)
    out = await generator.generate(batch(script=[step(0.25, observation="Try again.")] * 3))
    assert len(engine.calls) == 2
    assert out["stop_reasons"] == ["stop"]  # the last turn's own stop reason, as when an env ends the episode
    assert out["response_ids"] == [THREE + [EOS] + OBS_TRY + THREE + [EOS]]
    assert out["rewards"] == [[0.0] * 5 + [0.25] + [0.0] * 18 + [0.25]]
