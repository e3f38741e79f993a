"""`MCPEnvConfig`: the `environment.skyrl_gym.mcp_tool` block, validated, and which servers/tools a row uses.

Keys (all optional; documented on `MCPToolEnv`): servers, allowed_tools, call_timeout_s, connect_timeout_s,
retries, max_output_chars, max_calls_per_turn, strict_arguments, tool_prompt, terminal_tools, demonstrations,
reward_weights, last_turn_note. An unknown key is an error naming it, so a typo does not silently fall back to a
default.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skyrl_gym.common.config import checked_block, keys_of
from skyrl_integrations.mcp import client
from skyrl_integrations.mcp.prompt import TOOL_PROMPT_STYLES, validate_demonstrations
from skyrl_integrations.mcp.scoring import DEFAULT_REWARD_WEIGHTS, RewardWeights
from skyrl_integrations.mcp.spec import MCPServerSpec

WHERE = "environment.skyrl_gym.mcp_tool"
LAST_TURN_NOTE = "This is your last turn: reply with your final answer, without a tool call."


@dataclasses.dataclass(frozen=True)
class MCPEnvConfig:
    servers: dict[str, MCPServerSpec] = dataclasses.field(default_factory=dict)
    allowed_tools: frozenset[str] | None = None
    call_timeout_s: float = client.DEFAULT_CALL_TIMEOUT_S
    connect_timeout_s: float = client.DEFAULT_CONNECT_TIMEOUT_S
    retries: int = client.DEFAULT_RETRIES
    max_output_chars: int = client.DEFAULT_MAX_OUTPUT_CHARS
    max_calls_per_turn: int = 4
    strict_arguments: bool = False
    tool_prompt: str = "compact"
    terminal_tools: frozenset[str] = frozenset()
    demonstrations: tuple[dict[str, str], ...] = ()
    reward_weights: RewardWeights = DEFAULT_REWARD_WEIGHTS
    last_turn_note: str = LAST_TURN_NOTE

    @classmethod
    def from_env_config(cls, env_config: Any) -> MCPEnvConfig:
        values = checked_block(env_config, keys_of(cls), WHERE)
        if "servers" in values:
            values["servers"] = _server_table(values["servers"])
        for key in ("allowed_tools", "terminal_tools"):
            if values.get(key) is not None:
                values[key] = frozenset(_names(values[key], f"{WHERE}.{key}"))
        if "demonstrations" in values:
            demos, where = values["demonstrations"], f"{WHERE}.demonstrations"
            if isinstance(demos, str):
                demos, where = _load_json_file(demos, where), f"{where} ({demos})"
            values["demonstrations"] = tuple(validate_demonstrations(demos, where))
        if values.get("reward_weights") is not None:
            values["reward_weights"] = RewardWeights.parse(values["reward_weights"], f"{WHERE}.reward_weights")
        config = cls(**{k: v for k, v in values.items() if v is not None})
        config._validate()
        return config

    def _validate(self) -> None:
        for key in ("call_timeout_s", "connect_timeout_s"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{WHERE}.{key}: must be > 0, got {getattr(self, key)!r}")
        for key, low in (("retries", 0), ("max_output_chars", 1), ("max_calls_per_turn", 1)):
            if int(getattr(self, key)) < low:
                raise ValueError(f"{WHERE}.{key}: must be >= {low}, got {getattr(self, key)!r}")
        if not isinstance(self.strict_arguments, bool):
            raise ValueError(f"{WHERE}.strict_arguments: expected true or false, got {self.strict_arguments!r}")
        if not isinstance(self.last_turn_note, str):
            raise ValueError(f"{WHERE}.last_turn_note: expected a string, got {self.last_turn_note!r}")
        if self.tool_prompt not in TOOL_PROMPT_STYLES:
            raise ValueError(f"{WHERE}.tool_prompt: expected one of {TOOL_PROMPT_STYLES}, got {self.tool_prompt!r}")

    def servers_for(self, extra_info: Mapping[str, Any]) -> list[MCPServerSpec]:
        """The row's servers: names from `extra_info.servers` (default: every configured server), each launched
        as configured in `servers`, else as the bundled server of that name."""
        names = _names(extra_info.get("servers"), "extra_info.servers") if extra_info.get("servers") else []
        names = names or list(self.servers)
        if not names:
            raise ValueError(f"no MCP servers: set {WHERE}.servers or the row's extra_info.servers")
        specs = []
        for name in names:
            try:
                specs.append(self.servers.get(name) or MCPServerSpec.bundled(name))
            except ValueError as exc:
                raise ValueError(f"extra_info.servers: {exc}; or define {name!r} in {WHERE}.servers") from None
        return specs

    def tools_for(self, extra_info: Mapping[str, Any]) -> frozenset[str] | None:
        """Allowed tool names: `allowed_tools` and the row's `extra_info.tools`, intersected when both are set."""
        row = extra_info.get("tools")
        row = frozenset(_names(row, "extra_info.tools")) if row else None
        if row is None or self.allowed_tools is None:
            return row if self.allowed_tools is None else self.allowed_tools
        return row & self.allowed_tools


def _server_table(value: Any) -> dict[str, MCPServerSpec]:
    """`servers` as a mapping name -> spec, or a list of bundled names / mappings with a `name`."""
    if isinstance(value, Mapping):
        return {str(name): MCPServerSpec.from_config(str(name), spec) for name, spec in value.items()}
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{WHERE}.servers: expected a list or a mapping, got {type(value).__name__}")
    table = {}
    for i, item in enumerate(value):
        if isinstance(item, str):
            table[item] = MCPServerSpec.from_config(item)
        elif isinstance(item, Mapping) and isinstance(item.get("name"), str):
            table[item["name"]] = MCPServerSpec.from_config(item["name"], item)
        else:
            raise ValueError(f"{WHERE}.servers[{i}]: expected a bundled server name or a mapping with a 'name'")
    return table


def _load_json_file(path: str, where: str) -> Any:
    try:
        return json.loads(Path(path).expanduser().read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: cannot read JSON file {path!r}: {exc}") from None


def _names(value: Any, where: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: expected a list of names, got {value!r}")
    return list(value)
