"""Why a generation or a whole trajectory ended: the values of `stop_reason` in engine outputs, generator outputs
and eval dumps. Plain string constants, so they compare equal to the strings written to disk."""

from __future__ import annotations

from skyrl_gym.core import InfraFailureReason


class StopReason:
    """Why a generation (or a whole trajectory) ended. Engines produce the first three."""

    STOP = "stop"
    """EOS or a stop string was produced."""
    LENGTH = "length"
    """`max_tokens` was reached, or (generator) the running context exceeded `max_input_length`."""
    ABORT = "abort"
    """The request was aborted (e.g. paused for a weight update); the tokens so far are returned."""


class TrajectoryStopReason(StopReason):
    """Trajectory-level stop reasons. Besides the engine's, infrastructure failures get their own, so they
    are counted per env and kept out of the advantage baseline instead of being scored as task failures. Those are
    the values of `skyrl_gym.InfraFailureReason` (their one definition, with what each means)."""

    ENV_INIT_FAILED = InfraFailureReason.ENV_INIT_FAILED.value
    ENV_STEP_FAILED = InfraFailureReason.ENV_STEP_FAILED.value
    TIMEOUT = InfraFailureReason.TIMEOUT.value
    TOOL_SERVER_FAILED = InfraFailureReason.TOOL_SERVER_FAILED.value
    USER_SIMULATOR_FAILED = InfraFailureReason.USER_SIMULATOR_FAILED.value
    ENGINE_FAILED = InfraFailureReason.ENGINE_FAILED.value

    INFRA_FAILURES = frozenset(reason.value for reason in InfraFailureReason)
