"""`TauBenchEnv` (env id ``tau_bench``): a tau2 customer-service episode (retail or airline) with a user simulator.

`init` builds the system prompt (domain policy, tool schemas, call format) and gets the user simulator's opening
line. Each `step` parses the agent's reply with `skyrl_integrations.tool_parser.parse_tool_calls` (which finds
the calls; their names and arguments stay as written), then

- one tool call: runs it in-process on the episode's DB (`toolkit`) exactly as written, as official tau2 does (a
  tool name or argument name that is not tau2's gets tau2's own error; ``repair_calls`` repairs them first), and
  answers ``Tool result (name):`` / ``Tool error (name):`` with tau2's exact output; further calls in the same
  reply are skipped (and counted);
- a call attempt that cannot be read (bad JSON, arguments not an object): answers with a hint naming the problem
  (counted per kind);
- a plain message: sends it to the user simulator and answers with the user's reply.

Every turn is recorded as tau2 messages (`Trajectory`), which tau2's evaluators grade at the end (`reward`).

The episode ends when the user's reply holds a stop token (``###STOP###`` / ``###TRANSFER###`` /
``###OUT-OF-SCOPE###``), on a ``transfer_to_human_agents`` call (unless ``transfer_ends_episode`` is false); both
are graded (`reward`). Reaching ``max_turns`` agent turns or ``max_tool_errors`` tool errors ends it with reward 0.
A user-simulator endpoint failure ends it with reward 0 and the step's ``infra_failure`` (a
`skyrl_gym.InfraFailure` with reason ``user_simulator_failed`` and the endpoint's error), so the generator keeps the
trajectory out of training; a failure of its opening line raises from `init`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from skyrl_gym import InfraFailure, InfraFailureReason
from skyrl_gym.common.config import keys_of
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType
from skyrl_integrations.tau_bench.config import TauBenchEnvConfig
from skyrl_integrations.tau_bench.domains import get_domain
from skyrl_integrations.tau_bench.metrics import EpisodeCounters
from skyrl_integrations.tau_bench.prompt import CALL_FORMAT, build_prompt
from skyrl_integrations.tau_bench.reward import GroundTruth, RewardResult, compute_reward
from skyrl_integrations.tau_bench.toolkit import EpisodeToolkit
from skyrl_integrations.tau_bench.trajectory import Trajectory
from skyrl_integrations.tau_bench.users import UserSimulator, UserSimulatorError, stop_token
from skyrl_integrations.tool_parser import ParseFailure, ParseResult, ToolRegistry, parse_tool_calls
from skyrl_integrations.tool_parser.arguments import check_arguments

TRANSFER_TOOL = "transfer_to_human_agents"
EMPTY_MESSAGE_HINT = "Your reply was empty. Call a tool or write a message to the user."


class TauBenchEnv(BaseTextEnv):
    """A tau2 task. ``env_config``: see `TauBenchEnvConfig`. From the row (``extras``): ``extra_info.domain`` and
    ``extra_info.task_id`` (required), ``extra_info.instruction`` (the user scenario; default: the task's),
    ``reward_spec.ground_truth`` (format: `GroundTruth`; default: the task's evaluation criteria) and
    ``max_turns`` (the generator's, upstream's contract; the smaller of it and the config's wins, so the env knows
    its last turn and reports the episode's end as ``max_turns``)."""

    env_config_keys: ClassVar[frozenset[str]] = keys_of(TauBenchEnvConfig)

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        extras = dict(extras or {})
        self.config = TauBenchEnvConfig.from_env_config(env_config)
        extra_info = extras.get("extra_info") or {}
        missing = [key for key in ("domain", "task_id") if extra_info.get(key) is None]
        if missing:
            raise ValueError(f"TauBenchEnv: the row's extra_info has no {missing}")
        self.domain = get_domain(str(extra_info["domain"]))
        self.task = self.domain.task(str(extra_info["task_id"]))
        self.instruction = str(extra_info.get("instruction") or self.task.user_scenario)
        truth = (extras.get("reward_spec") or {}).get("ground_truth")
        self.ground_truth = GroundTruth.from_task(self.task) if truth is None else GroundTruth.parse(truth)
        limits = [self.config.max_turns] + ([int(extras["max_turns"])] if extras.get("max_turns") else [])
        self.max_turns = min(limits)
        self.tools = ToolRegistry.from_tools(self.domain.tool_schemas)
        self._reset()

    def _reset(self) -> None:
        self.turns = 0
        self.counters = EpisodeCounters()
        self.toolkit = EpisodeToolkit(self.domain)
        self.user: UserSimulator = self.config.make_user(self.instruction)
        self.trajectory: Trajectory | None = None
        """The episode as tau2 messages; started by `init`."""
        self.stop_reason: str | None = None
        self.result: RewardResult | None = None

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        self._reset()
        opening = self.user.opening()  # a failure here raises: the generator records env_init_failed
        self.counters.record_user_turn(opening)
        self.trajectory = Trajectory(opening.text)
        messages = build_prompt(
            prompt,
            self.domain.policy if self.config.include_policy else None,
            self.domain.tool_schemas,
            opening.text,
            style=self.config.tool_prompt,
            demonstrations=self.config.demonstrations,
        )
        return messages, {
            "domain": self.domain.name,
            "tools": [t["function"]["name"] for t in self.domain.tool_schemas],
        }

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        self.counters.add("turns")
        parsed = parse_tool_calls(action)
        metadata: dict[str, Any] = {"turn": self.turns, "parse_format": parsed.format}
        if parsed.calls:
            return self._run_call(parsed, metadata)
        if parsed.failure not in (None, ParseFailure.NO_CALL):
            self.counters.add(f"parse_failures_{parsed.failure.value}")
            metadata["parse_failure"] = parsed.failure.value
            hint = f"Your tool call could not be used ({parsed.failure.value}): {parsed.error}\n\n{CALL_FORMAT}"
            return self._continue(_user(hint), metadata)
        if not parsed.text:
            self.counters.add("empty_messages")
            return self._continue(_user(EMPTY_MESSAGE_HINT), metadata)
        self.trajectory.agent_says(parsed.text)
        try:
            reply = self.user.reply(parsed.text)
        except UserSimulatorError as error:
            reason = InfraFailureReason.USER_SIMULATOR_FAILED
            output = self._finish([], reason.value, metadata)
            output["infra_failure"] = InfraFailure.from_exception(reason, error)
            return output
        self.counters.record_user_turn(reply)
        self.trajectory.user_says(reply.text)
        if stop_token(reply.text) is not None:
            return self._finish(_user(reply.text), "user_stop", metadata)
        return self._continue(_user(reply.text), metadata)

    def get_metrics(self) -> dict[str, Any]:
        unchecked = 0 if "NL_ASSERTION" in self.ground_truth.reward_basis else len(self.ground_truth.nl_assertions)
        return self.counters.as_metrics(self.result, self.stop_reason, unchecked)

    # ------------------------------------------------------------------------------------- internals

    def _run_call(self, parsed: ParseResult, metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        """Run the reply's first call (repaired first when ``repair_calls`` is on) and answer with tau2's output."""
        written = parsed.calls[0]
        self.counters.add("skipped_calls", len(parsed.calls) - 1)
        name, arguments = written.name, written.arguments
        if self.config.repair_calls:
            name, arguments = self._repaired(name, arguments)
        repaired = (name, arguments) != (written.name, written.arguments)
        self.counters.add("repaired_calls", int(repaired))
        answer = self.trajectory.agent_calls(self.toolkit, name, arguments, parsed.text)
        self.counters.add("tool_calls")
        self.counters.add("tool_errors", int(answer.error))
        metadata["tool_call"] = {"name": name, "arguments": arguments, "error": answer.error, "repaired": repaired}
        text = f"{'Tool error' if answer.error else 'Tool result'} ({name}):\n{answer.content}"
        if len(parsed.calls) > 1:
            text += f"\n\nOnly one tool call runs per reply; {len(parsed.calls) - 1} more skipped."
        if name == TRANSFER_TOOL and self.config.transfer_ends_episode:
            return self._finish(_user(text), "transfer", metadata)
        if self.counters.values["tool_errors"] >= self.config.max_tool_errors:
            return self._finish(_user(text), "too_many_errors", metadata)
        return self._continue(_user(text), metadata)

    def _repaired(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The call as the tool-call parser repairs it against the tool's schema (see `tool_parser.arguments`);
        unchanged when no tool matches, and its arguments unchanged when they do not fit even after repair (tau2
        then answers with its own error)."""
        spec = self.tools.resolve(name)
        if spec is None:
            return name, arguments
        checked, problem = check_arguments(spec, arguments)
        return spec.name, arguments if problem is not None else checked

    def _continue(self, observations: ConversationType, metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        if self.turns >= self.max_turns:
            return self._finish(observations, "max_turns", metadata)
        return BaseTextEnvStepOutput(observations=observations, reward=0.0, done=False, metadata=metadata)

    def _finish(self, observations: ConversationType, reason: str, metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        self.stop_reason = reason
        if reason in ("user_stop", "transfer"):
            self.result = compute_reward(self.domain, self.task, self.ground_truth, self.trajectory.messages)
        reward = self.result.reward if self.result is not None else 0.0
        metadata.update(
            done_reason=reason,
            success=self.result is not None and self.result.success,
            reward_components=dict(self.result.components) if self.result is not None else {},
        )
        return BaseTextEnvStepOutput(observations=observations, reward=reward, done=True, metadata=metadata)


def _user(text: str) -> ConversationType:
    return [{"role": "user", "content": text}]
