"""An engine that becomes unreachable turns its episode into an infrastructure failure (`engine_failed`); every row
carries the weight version that generated it; re-tokenised turns from text-only servers are counted."""

from __future__ import annotations

from skyrl_gym import InfraFailure, InfraFailureReason
from skyrl_train.inference_engines.client import EngineUnavailableError

from .test_failures import EOS, FOUR, OBS_TRY, THREE

UNREACHABLE = EngineUnavailableError("http://127.0.0.1:9 unreachable after 4 attempts (ConnectError: refused)")


async def test_an_unreachable_engine_mid_episode_keeps_the_turns_so_far_masked(make_generator, batch, step):
    script = [step(0.5, observation="Try again.")]
    generator, _ = make_generator([THREE + [EOS], {"ids": [], "error": UNREACHABLE}])
    out = await generator.generate(batch(script=script))
    assert out["stop_reasons"] == ["engine_failed"]
    assert out["response_ids"] == [THREE + [EOS]]
    assert out["loss_masks"] == [[0] * 6]
    assert out["env_metrics"][0]["engine_failed"] == 1
    assert out["infra_failures"] == [
        InfraFailure(InfraFailureReason.ENGINE_FAILED, f"EngineUnavailableError: {UNREACHABLE}")
    ]
    assert out["rollout_metrics"]["generate/engine_failures"] == 1
    assert out["rollout_metrics"]["generate/stop_reason/engine_failed"] == 1


async def test_an_unreachable_engine_on_the_first_turn_gives_a_placeholder(make_generator, batch, step):
    generator, _ = make_generator({"q_0": [{"ids": [], "error": UNREACHABLE}], "q_1": [FOUR + [EOS]]})
    out = await generator.generate(batch(script=[step(1.0, done=True)], n=2))
    assert out["stop_reasons"] == ["engine_failed", "stop"]
    assert (out["response_ids"][0], out["loss_masks"][0]) == ([EOS], [0])
    assert out["weight_versions"] == [None, None]


async def test_a_row_carries_the_oldest_weight_version_of_its_turns(make_generator, batch, step):
    script = [step(0.0, observation="Try again."), step(1.0, done=True)]
    generator, _ = make_generator(
        [{"ids": THREE + [EOS], "weight_version": 3}, {"ids": FOUR + [EOS], "weight_version": 4}]
    )
    out = await generator.generate(batch(script=script))
    assert out["response_ids"] == [THREE + [EOS] + OBS_TRY + FOUR + [EOS]]
    assert out["weight_versions"] == [3]
    assert (
        out["rollout_metrics"]["generate/min_weight_version"],
        out["rollout_metrics"]["generate/max_weight_version"],
    ) == (3, 3)


async def test_step_wise_rows_carry_their_own_turns_weight_version(make_generator, batch, step):
    script = [step(0.0, observation="Try again."), step(1.0, done=True)]
    generator, _ = make_generator(
        [{"ids": THREE + [EOS], "weight_version": 3}, {"ids": FOUR + [EOS], "weight_version": 4}],
        step_wise_trajectories=True,
    )
    out = await generator.generate(batch(script=script))
    assert out["weight_versions"] == [3, 4]
    assert (
        out["rollout_metrics"]["generate/min_weight_version"],
        out["rollout_metrics"]["generate/max_weight_version"],
    ) == (3, 4)


async def test_re_tokenised_turns_are_counted(make_generator, batch, step):
    script = [step(0.0, observation="Try again."), step(1.0, done=True)]
    generator, _ = make_generator([{"ids": THREE + [EOS], "retokenized": True}, FOUR + [EOS]])
    out = await generator.generate(batch(script=script))
    assert out["env_metrics"][0]["retokenized_turns"] == 1
    assert out["rollout_metrics"]["generate/retokenized_turns"] == 1
