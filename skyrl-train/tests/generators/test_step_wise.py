"""Step-wise trajectories: one output row per turn, the running context as its prompt."""

from __future__ import annotations

PROMPT_LEN = 37
"""Length of the templated "What is 2+2?" prompt."""
EOS = 2
THREE = [57, 1510, 216, 35, 30]
"""I think 3."""
FOUR = [1589, 314, 216, 36, 30]
"""It is 4."""
OBS_TRY = [198, 1, 4093, 198, 20011, 1163, 30, 2, 198, 1, 520, 9531, 198]
"""\\n<|im_start|>user\\nTry again.<|im_end|>\\n<|im_start|>assistant\\n"""


async def two_turns(make_generator, batch, step, **overrides):
    script = [step(0.2, observation="Try again."), step(1.0, done=True)]
    generator, _ = make_generator([THREE + [EOS], FOUR + [EOS]], step_wise_trajectories=True, **overrides)
    return await generator.generate(batch(script=script))


async def test_each_turn_is_a_row_with_the_running_context_as_prompt(make_generator, batch, step):
    out = await two_turns(make_generator, batch, step)
    prompt = out["prompt_token_ids"][0]
    assert len(prompt) == PROMPT_LEN
    assert out["prompt_token_ids"][1] == prompt + THREE + [EOS] + OBS_TRY
    assert out["response_ids"] == [THREE + [EOS], FOUR + [EOS]]
    assert out["loss_masks"] == [[1] * 6, [1] * 6]


async def test_each_rows_reward_is_on_its_last_sampled_token(make_generator, batch, step):
    out = await two_turns(make_generator, batch, step)
    assert out["rewards"] == [[0.0] * 5 + [0.2], [0.0] * 5 + [1.0]]


async def test_only_the_last_row_is_the_last_step_and_carries_env_metrics(make_generator, batch, step):
    out = await two_turns(make_generator, batch, step)
    assert out["is_last_step"] == [False, True]
    assert out["env_metrics"] == [
        {},
        {
            "turns": 2,
            "empty_responses": 0,
            "env_init_failed": 0,
            "env_step_failed": 0,
            "trajectory_timeout": 0,
            "tool_server_failed": 0,
            "user_simulator_failed": 0,
            "engine_failed": 0,
            "retokenized_turns": 0,
            "special_token_messages": 0,
        },
    ]
    assert [tid.to_string() for tid in out["trajectory_ids"]] == ["q_0", "q_0"]


async def test_step_wise_metrics_count_trajectories_not_rows(make_generator, batch, step):
    out = await two_turns(make_generator, batch, step)
    assert out["rollout_metrics"]["generate/stop_reason/stop"] == 1
    assert out["rollout_metrics"]["environment/test_scripted/turns"] == 2.0


async def test_step_wise_placeholder_is_one_last_step(make_generator, batch):
    generator, _ = make_generator([], step_wise_trajectories=True)
    out = await generator.generate(batch(fail_in="init"))
    assert (out["response_ids"], out["is_last_step"], out["stop_reasons"]) == ([[EOS]], [True], ["env_init_failed"])


async def test_step_wise_env_step_failure_masks_every_row(make_generator, batch, step):
    generator, _ = make_generator([THREE + [EOS], FOUR + [EOS]], step_wise_trajectories=True)
    out = await generator.generate(batch(script=[step(0.2, observation="Try again.")], fail_in="step:2"))
    assert out["loss_masks"] == [[0] * 6, [0] * 6]
    assert out["stop_reasons"] == ["stop", "env_step_failed"]


async def test_not_step_wise_has_no_is_last_step(make_generator, batch, step):
    generator, _ = make_generator([FOUR + [EOS]])
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert out["is_last_step"] is None
