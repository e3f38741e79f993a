"""`BaseTextEnv`: the base class of chat-style environments (OpenAI message lists in, text actions in).

An env author subclasses it with the constructor `__init__(self, env_config=None, extras={})`, where
`extras` holds every dataset column except `prompt` and `env_class` (plus `max_turns` set by the
generator), and writes `step` (or `step_async`). Everything else has a default.
"""

from __future__ import annotations

from typing import Any, TypedDict

from skyrl_gym.core import Env, InfraFailure, implements_async
from skyrl_gym.metrics import default_aggregate_metrics

MessageType = dict[str, str]
ConversationType = list[MessageType]


class BaseTextEnvStepOutput(TypedDict, total=False):
    observations: ConversationType
    """New messages to append to the conversation, usually one user/tool message; [] for none."""
    reward: float
    """Reward for this turn (turn-level rewards are supported; return 0 on non-final turns for outcome-only)."""
    done: bool
    metadata: dict[str, Any]
    """Free-form information about the step; the trainer does not read it."""
    postprocessed_action: str | None
    """Replaces the model's output text. Breaks token-in/token-out: the generator warns when it is used."""
    infra_failure: InfraFailure
    """Set only when the env recovered from an infrastructure failure during this step (e.g. its tool server
    crashed and was restarted): the trajectory is then kept out of training. Not part of upstream's contract."""


class BaseTextEnv(Env[ConversationType, str]):
    """A multi-turn text environment with optional tool groups."""

    def __init__(self):
        self.turns = 0
        self.max_turns = 1
        self.tool_groups = []
        self.tool_to_toolgroup: dict[str, str] = {}

    def init_tool_groups(self, tool_groups: list | None = None) -> None:
        """Attach tool groups and index which group owns each tool name (names must be unique)."""
        self.tool_groups = list(tool_groups or [])
        self.tool_to_toolgroup = {}
        for group in self.tool_groups:
            for tool_name, group_name in group.get_tool_to_group_mapping().items():
                if tool_name in self.tool_to_toolgroup:
                    raise ValueError(
                        f"tool {tool_name!r} is provided by both {self.tool_to_toolgroup[tool_name]!r} and "
                        f"{group_name!r}; tool names must be unique across an env's tool groups"
                    )
                self.tool_to_toolgroup[tool_name] = group_name

    def _execute_tool(self, tool_group_name: str, tool_name: str, tool_input: list | tuple) -> Any:
        """Run `tool_name` of the group called `tool_group_name` with positional `tool_input`."""
        if not isinstance(tool_input, list | tuple):
            raise TypeError(f"tool_input must be a list or tuple of positional arguments, got {type(tool_input)}")
        for group in self.tool_groups:
            if group.get_name() == tool_group_name:
                return group.execute_tool(tool_name, *tool_input)
        raise ValueError(f"no tool group named {tool_group_name!r} (have {[g.get_name() for g in self.tool_groups]})")

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start an episode. The default keeps the prompt as is; envs may rewrite it (e.g. add a system message)."""
        if implements_async(self, "init"):
            return super().init(prompt)
        return prompt, {}

    def get_metrics(self) -> dict[str, Any]:
        """Metrics of the finished episode, collected by the generator after the episode ends."""
        return {}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        """Combine the `get_metrics()` dicts of many episodes; the default averages numeric values."""
        return default_aggregate_metrics(metrics)
