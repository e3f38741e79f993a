"""An env that recovered from a tool-server failure flags the step (`infra_failure` in its output): the episode runs
to its end, then the trajectory gets the reported reason as its stop reason, a zeroed loss mask and its counter."""

from __future__ import annotations

from skyrl_gym import InfraFailure, InfraFailureReason
from skyrl_train.generators.base import TrajectoryID

EOS = 2
THREE = [57, 1510, 216, 35, 30]
"""I think 3."""
FOUR = [1589, 314, 216, 36, 30]
"""It is 4."""
OBS_TRY = [198, 1, 4093, 198, 20011, 1163, 30, 2, 198, 1, 520, 9531, 198]
"""\\n<|im_start|>user\\nTry again.<|im_end|>\\n<|im_start|>assistant\\n"""
CRASH = InfraFailure(InfraFailureReason.TOOL_SERVER_FAILED, "the tool server 'toy' stopped responding")


def crashed_then_done(step):
    flagged = step(0.0, observation="Try again.")
    flagged["infra_failure"] = CRASH
    return [flagged, step(1.0, done=True)]


async def test_flagged_episode_runs_to_the_end_and_is_masked(make_generator, batch, step):
    generator, engine = make_generator([THREE + [EOS], FOUR + [EOS]])
    out = await generator.generate(batch(script=crashed_then_done(step)))
    assert len(engine.calls) == 2
    assert out["stop_reasons"] == ["tool_server_failed"]
    assert out["response_ids"] == [THREE + [EOS] + OBS_TRY + FOUR + [EOS]]
    assert out["loss_masks"] == [[0] * 25]
    assert out["rewards"] == [[0.0] * 24 + [1.0]]


async def test_flagged_episode_keeps_env_metrics_and_counts_the_failure(make_generator, batch, step):
    generator, _ = make_generator([THREE + [EOS], FOUR + [EOS]])
    out = await generator.generate(batch(script=crashed_then_done(step)))
    assert out["env_metrics"] == [
        {
            "turns": 2,
            "empty_responses": 0,
            "env_init_failed": 0,
            "env_step_failed": 0,
            "trajectory_timeout": 0,
            "tool_server_failed": 1,
            "user_simulator_failed": 0,
            "engine_failed": 0,
            "retokenized_turns": 0,
            "special_token_messages": 0,
        }
    ]
    assert out["infra_failures"] == [CRASH]


async def test_rollout_metrics_count_it_as_an_infra_failure(make_generator, batch, step):
    generator, _ = make_generator({"q_0": [THREE + [EOS], FOUR + [EOS]], "q_1": [FOUR + [EOS]]})
    failed = batch(script=crashed_then_done(step))
    ok = batch(script=[step(1.0, done=True)])
    mixed = {key: failed[key] + ok[key] for key in ("prompts", "env_classes", "env_extras")}
    mixed["trajectory_ids"] = [TrajectoryID("q", 0), TrajectoryID("q", 1)]
    metrics = (await generator.generate(mixed))["rollout_metrics"]
    assert metrics["generate/stop_reason/tool_server_failed"] == 1
    assert metrics["generate/tool_server_failures"] == 1
    assert metrics["environment/test_scripted/tool_server_failures"] == 1
    assert metrics["environment/test_scripted/turns"] == 1.0  # the flagged 2-turn episode is left out


async def test_step_wise_rows_are_all_masked_and_the_last_carries_the_stop_reason(make_generator, batch, step):
    generator, _ = make_generator([THREE + [EOS], FOUR + [EOS]], step_wise_trajectories=True)
    out = await generator.generate(batch(script=crashed_then_done(step)))
    assert out["stop_reasons"] == ["stop", "tool_server_failed"]
    assert out["loss_masks"] == [[0] * 6, [0] * 6]


async def test_an_unflagged_episode_is_not_marked(make_generator, batch, step):
    generator, _ = make_generator([THREE + [EOS], FOUR + [EOS]])
    script = [step(0.0, observation="Try again."), step(1.0, done=True)]
    out = await generator.generate(batch(script=script))
    assert out["stop_reasons"] == ["stop"]
    assert out["loss_masks"] == [[1] * 6 + [0] * 13 + [1] * 6]


async def test_a_failed_user_simulator_gets_its_own_stop_reason(make_generator, batch, step):
    flagged = step(0.0, observation="(the simulated user did not answer)")
    flagged["infra_failure"] = InfraFailure(InfraFailureReason.USER_SIMULATOR_FAILED, "UserSimulatorError: 503")
    generator, _ = make_generator([THREE + [EOS], FOUR + [EOS]])
    out = await generator.generate(batch(script=[flagged, step(0.0, done=True)]))
    assert out["stop_reasons"] == ["user_simulator_failed"]
    assert set(out["loss_masks"][0]) == {0}
    assert out["rollout_metrics"]["generate/user_simulator_failures"] == 1
    assert out["rollout_metrics"]["generate/tool_server_failures"] == 0
