"""Trajectory stop reasons: the engine's three, and which count as infrastructure failures."""

from skyrl_gym.common.stop_reasons import StopReason, TrajectoryStopReason


def test_infra_failures_are_the_six_failure_reasons():
    assert set(TrajectoryStopReason.INFRA_FAILURES) == {
        "env_init_failed",
        "env_step_failed",
        "timeout",
        "tool_server_failed",
        "user_simulator_failed",
        "engine_failed",
    }


def test_the_engine_reasons_are_shared_and_are_not_failures():
    engine = (StopReason.STOP, StopReason.LENGTH, StopReason.ABORT)
    assert engine == (TrajectoryStopReason.STOP, TrajectoryStopReason.LENGTH, TrajectoryStopReason.ABORT)
    assert engine == ("stop", "length", "abort")
    assert not set(engine) & TrajectoryStopReason.INFRA_FAILURES
