"""`MCPToolEnv` (env id ``mcp_tool``): multi-turn tool use against real MCP servers, scored from the dataset row.

One episode: `init` lists the servers' tools and builds the prompt (see `prompt`); each `step` parses the model's
reply with `skyrl_integrations.tool_parser.parse_tool_calls` and then

- runs its calls (at most `max_calls_per_turn`, in order) and answers with one ``user`` message holding each
  call's ``Tool result (name):`` and output, or its one-line ``Tool error (name): message`` (see `render_call`);
- or, for a call attempt that could not be parsed, answers with a hint naming the problem (counted per kind);
- or, for a reply without a call attempt, takes it as the final answer and ends the episode.

The episode also ends after `max_turns` turns or a call to one of `terminal_tools`. The reward (see `scoring`)
is given on the final step; earlier steps get 0. Tool and server failures never raise out of `step`: they become
error observations. A tool server that crashed during a step is restarted for the next call, and the step's
``infra_failure`` (a `skyrl_gym.InfraFailure` with reason ``tool_server_failed`` and the call's error) tells the
generator to keep the trajectory out of training.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar

from skyrl_gym import InfraFailure, InfraFailureReason
from skyrl_gym.common.config import keys_of
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType
from skyrl_integrations.mcp.client import MCPToolGroup, ToolResult, run_blocking
from skyrl_integrations.mcp.config import MCPEnvConfig
from skyrl_integrations.mcp.metrics import EpisodeCounters, aggregate_metrics
from skyrl_integrations.mcp.prompt import CALL_IN_WORDS, build_prompt
from skyrl_integrations.mcp.scoring import CallRecord, EpisodeRecord, GroundTruth, Score, score_episode
from skyrl_integrations.tool_parser import ParseFailure, ToolCall, ToolRegistry, parse_tool_calls

DEFAULT_MAX_TURNS = 5
"""When neither the row's ground truth nor the generator sets `max_turns`."""
FORMAT_REMINDER = f"{CALL_IN_WORDS}; or reply without a tool call to give your final answer."
"""Follows a call that could not be used. Prose, not a template: small models copy a template's placeholders
(`{"name": "<tool name>", "arguments": {...}}`) verbatim, which is malformed again, turn after turn."""


class MCPToolEnv(BaseTextEnv):
    """Tool use over MCP servers, with reward from ``reward_spec.ground_truth`` (format: `scoring.GroundTruth`).

    ``env_config`` (the ``environment.skyrl_gym.mcp_tool`` block; every key optional):

    - ``servers``: how to launch servers, as a list of bundled names / mappings with a ``name``, or a mapping
      name -> bundled name / ``{command, args, env, cwd}`` / ``{url}`` / ``{bundled, args, env}``. A row uses
      the servers named in its ``extra_info.servers`` (each as configured here, else the bundled server of that
      name), or every server configured here when the row names none.
    - ``allowed_tools``: tool names the agent may see and call; intersected with the row's ``extra_info.tools``
      when both are set; default: every tool of the row's servers.
    - ``call_timeout_s`` (30): per tool call. ``connect_timeout_s`` (60): starting a server. ``retries`` (2):
      extra attempts to start/reach a server.
    - ``max_output_chars`` (4000): longer tool outputs are truncated with a marker.
    - ``max_calls_per_turn`` (4): calls beyond this in one reply are skipped (and the model is told).
    - ``strict_arguments`` (false): a call with an argument its tool's input schema does not list is not run; the
      model is told which argument and which ones the tool takes. The schemas the MCP SDKs generate allow extra
      arguments and their servers drop them, so without this a policy can pad its calls with keys at no cost.
    - ``tool_prompt`` ("compact"): "compact" (one line per tool, for small-context models) or "full" (JSON
      schemas).
    - ``terminal_tools`` ([]): calling one ends the episode; its arguments count as part of the final answer.
    - ``demonstrations`` ([]): chat messages (user/assistant) inserted between the system prompt and the task,
      e.g. a worked tool call; small models rarely emit a call without them. A string is a path to a JSON file
      holding that list.
    - ``reward_weights`` (format 0.1, tools 0.2, params 0.2, answer 0.5): the weight of each reward component
      (`scoring.RewardWeights`); a mapping of the ones to change, e.g. ``{format: 0}``.
    - ``last_turn_note`` (`config.LAST_TURN_NOTE`): appended to the observation before the episode's last turn; "" for
      none.

    From the row (``extras``): ``reward_spec.ground_truth`` (required), ``extra_info.servers`` /
    ``extra_info.tools``, and ``max_turns`` (the generator's, upstream's contract): the episode's limit is the
    smaller of the ground truth's ``max_turns`` and the generator's (default `DEFAULT_MAX_TURNS` when neither is
    set). The env needs its last turn to score the episode there; the generator stops at its own limit anyway.
    """

    env_config_keys: ClassVar[frozenset[str]] = keys_of(MCPEnvConfig)

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        extras = dict(extras or {})
        self.config = MCPEnvConfig.from_env_config(env_config)
        extra_info = extras.get("extra_info") or {}
        reward_spec = extras.get("reward_spec") or {}
        if "ground_truth" not in reward_spec:
            raise ValueError("MCPToolEnv: the row has no reward_spec.ground_truth")
        self.ground_truth = GroundTruth.parse(reward_spec["ground_truth"])
        self.max_turns = _max_turns(self.ground_truth.max_turns, extras.get("max_turns"))
        self.allowed_tools = self.config.tools_for(extra_info)
        self.groups = [
            MCPToolGroup(
                spec,
                call_timeout_s=self.config.call_timeout_s,
                max_output_chars=self.config.max_output_chars,
                allowed_tools=self.allowed_tools,
                retries=self.config.retries,
                connect_timeout_s=self.config.connect_timeout_s,
            )
            for spec in self.config.servers_for(extra_info)
        ]
        self.tools: list[dict[str, Any]] = []
        self.registry = ToolRegistry.from_tools([])
        self._reset()

    def _reset(self) -> None:
        self.turns = 0
        self.counters = EpisodeCounters()
        self.calls: list[CallRecord] = []
        self.final_answer: str | None = None
        self.score: Score | None = None

    # ----------------------------------------------------------------------------------------- hooks

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        return run_blocking(self.init_async(prompt))

    def step(self, action: str) -> BaseTextEnvStepOutput:
        return run_blocking(self.step_async(action))

    async def init_async(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """List the servers' tools (starting or re-checking their sessions) and build the opening chat."""
        self._reset()
        listings = await asyncio.gather(*(group.list_tools_async() for group in self.groups))
        self.tools = [tool for listing in listings for tool in listing]
        self.registry = ToolRegistry.from_tools(self.tools, closed=self.config.strict_arguments)
        self.init_tool_groups(self.groups)  # raises if two servers offer the same tool name
        missing = sorted((self.allowed_tools or set()) - set(self.tool_to_toolgroup))
        if missing:
            servers = [group.name for group in self.groups]
            raise ValueError(f"MCPToolEnv: allowed tools {missing} are not offered by the servers {servers}")
        messages = build_prompt(
            prompt,
            self.tools,
            style=self.config.tool_prompt,
            max_calls_per_turn=self.config.max_calls_per_turn,
            demonstrations=self.config.demonstrations,
        )
        return messages, {"tools": [tool["name"] for tool in self.tools]}

    async def step_async(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        self.counters.turns = self.turns
        parsed = parse_tool_calls(action, self.registry)
        failure = None if parsed.failure in (None, ParseFailure.NO_CALL) else parsed.failure
        metadata: dict[str, Any] = {
            "turn": self.turns,
            "parse_format": parsed.format,
            "parse_failure": None if failure is None else failure.value,
        }
        if failure is not None:
            self.counters.record_parse_failure(failure)
        if not parsed.calls and failure is None:
            self.final_answer = parsed.text
            return self._finish([], "final_answer", metadata)

        calls = parsed.calls[: self.config.max_calls_per_turn]
        parts, records, crashes = [], [], []
        for call in calls:
            result = await self._run(call)
            records.append({"tool": call.name, "arguments": call.arguments, "error_kind": result.error_kind})
            parts.append(render_call(call.name, result))
            if result.error_kind == "server_crashed":
                crashes.append(result.text)
        metadata["tool_calls"] = records
        skipped = len(parsed.calls) - len(calls)
        if skipped:
            self.counters.skipped_calls += skipped
            parts.append(f"Only {len(calls)} tool call(s) run per reply; {skipped} more skipped.")
        if failure is not None:
            parts.append(f"Your tool call could not be used ({failure.value}): {parsed.error}\n{FORMAT_REMINDER}")
        output = self._after_calls(parsed.text, calls, parts, metadata)
        if crashes:
            output["infra_failure"] = InfraFailure(InfraFailureReason.TOOL_SERVER_FAILED, crashes[0])
        return output

    def _after_calls(
        self, text: str, calls: list[ToolCall], parts: list[str], metadata: dict[str, Any]
    ) -> BaseTextEnvStepOutput:
        """The step's outcome once its calls ran: the end of the episode (a terminal tool, the last turn) or the
        observation for the next turn."""
        terminal = [call for call in calls if call.name in self.config.terminal_tools]
        if terminal:
            self.final_answer = "\n".join([text, *_string_values(terminal[-1].arguments)]).strip()
            return self._finish(_observation(parts), "terminal_tool", metadata)
        if self.turns >= self.max_turns:
            return self._finish(_observation(parts), "max_turns", metadata)
        if self.turns == self.max_turns - 1 and self.config.last_turn_note:
            parts.append(self.config.last_turn_note)
        return BaseTextEnvStepOutput(observations=_observation(parts), reward=0.0, done=False, metadata=metadata)

    def close(self) -> None:
        """Release the tool groups; the pooled server sessions stay up for the next episode."""
        for group in self.groups:
            group.close()

    # --------------------------------------------------------------------------------------- metrics

    def get_metrics(self) -> dict[str, Any]:
        score = self.score or score_episode(self.ground_truth, self._record(), self.config.reward_weights)
        return self.counters.as_metrics(reward=score.reward, success=score.success)

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        return aggregate_metrics(metrics)

    # ------------------------------------------------------------------------------------- internals

    async def _run(self, call: ToolCall) -> ToolResult:
        group = next((g for g in self.groups if g.name == self.tool_to_toolgroup.get(call.name)), None)
        if group is None:
            result = ToolResult(f"Unknown tool {call.name!r}.", True, "unknown_tool")
        else:
            result = await group.call_tool_async(call.name, call.arguments)
        self.counters.record_call(result)
        server = group.name if group is not None else ""
        self.calls.append(CallRecord(server, call.name, dict(call.arguments), result.error_kind, result.text))
        return result

    def _record(self) -> EpisodeRecord:
        return EpisodeRecord(tuple(self.calls), self.final_answer)

    def _finish(self, observations: ConversationType, reason: str, metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        self.score = score_episode(self.ground_truth, self._record(), self.config.reward_weights)
        metadata.update(done_reason=reason, success=self.score.success)
        return BaseTextEnvStepOutput(observations=observations, reward=self.score.reward, done=True, metadata=metadata)


def render_call(name: str, result: ToolResult) -> str:
    """A call's part of the observation: ``Tool result (name):`` with the output on the next line, or an error on one
    line, ``Tool error (name): message``, without the MCP SDK's ``Error executing tool <name>: `` prefix (it repeats
    the label). The form matters to small models: after ``Tool error (get_stock_price):``, a line break and the
    prefixed message "... use get_crypto_price with symbol ETHUSD", the default 135M model called `get_crypto_price`
    in 4 of 80 samples; after the one-line form, in 65 of 80 (learnings/main-job-tool-choice.md)."""
    if not result.is_error:
        return f"Tool result ({name}):\n{result.text}"
    message = result.text.removeprefix(f"Error executing tool {name}: ")
    return f"Tool error ({name}): {message}"


def _observation(parts: list[str]) -> ConversationType:
    return [{"role": "user", "content": "\n\n".join(parts)}] if parts else []


def _string_values(arguments: Mapping[str, Any]) -> list[str]:
    return [str(value) for value in arguments.values() if isinstance(value, str | int | float)]


def _max_turns(from_task: int | None, from_generator: Any) -> int:
    limits = [int(v) for v in (from_task, from_generator) if v is not None]
    value = min(limits) if limits else DEFAULT_MAX_TURNS
    if value < 1:
        raise ValueError(f"max_turns must be >= 1, got {value}")
    return value
