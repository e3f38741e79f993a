"""Per-episode counters of the MCP env and their batch aggregation.

`get_metrics()` of one episode returns (every key always present, so averages are over all episodes):

- ``turns``, ``tool_calls`` (calls sent to a server), ``tool_errors`` (calls that came back as any error),
  ``tool_timeouts``, ``server_crashes``, ``truncated_outputs``, ``skipped_calls`` (beyond `max_calls_per_turn`);
- ``parse_failures_<kind>`` for each failed call attempt kind (``malformed_json``, ``unknown_tool``,
  ``invalid_arguments``), counted per turn;
- ``success`` (0/1, see `scoring`) and ``reward``.

`aggregate_metrics` averages each key over the episodes and adds ``tool_error_rate`` (errors / calls over the
batch). The generator prefixes them with ``environment/mcp_tool/``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from skyrl_gym.metrics import default_aggregate_metrics
from skyrl_integrations.mcp.client import ToolResult
from skyrl_integrations.tool_parser import ParseFailure

PARSE_FAILURE_KINDS = tuple(kind.value for kind in ParseFailure if kind is not ParseFailure.NO_CALL)
"""`ParseFailure` values of a failed call attempt (a plain reply, "no_call", is not a failure)."""


@dataclasses.dataclass
class EpisodeCounters:
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    tool_timeouts: int = 0
    server_crashes: int = 0
    truncated_outputs: int = 0
    skipped_calls: int = 0
    parse_failures: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(PARSE_FAILURE_KINDS, 0))

    def record_call(self, result: ToolResult) -> None:
        self.tool_calls += 1
        self.tool_errors += result.is_error
        self.tool_timeouts += result.error_kind == "timeout"
        self.server_crashes += result.error_kind == "server_crashed"
        self.truncated_outputs += result.truncated

    def record_parse_failure(self, kind: ParseFailure) -> None:
        self.parse_failures[kind.value] += 1

    def as_metrics(self, *, reward: float, success: bool) -> dict[str, Any]:
        counts = {k: v for k, v in dataclasses.asdict(self).items() if k != "parse_failures"}
        failures = {f"parse_failures_{kind}": n for kind, n in self.parse_failures.items()}
        return {**counts, **failures, "success": int(success), "reward": float(reward)}


def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean of every key over the episodes, plus ``tool_error_rate`` = total tool errors / total tool calls."""
    out = default_aggregate_metrics(metrics)
    calls = sum(m.get("tool_calls", 0) for m in metrics)
    if calls:
        out["tool_error_rate"] = sum(m.get("tool_errors", 0) for m in metrics) / calls
    return out
