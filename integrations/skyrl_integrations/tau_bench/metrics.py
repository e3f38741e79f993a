"""Per-episode counters of the tau-bench env. `get_metrics()` returns, every key always present:

- ``turns`` (agent turns), ``tool_calls``, ``tool_errors`` (calls answered ``Error: ...``, among them calls of a
  tool tau2 does not have), ``skipped_calls`` (calls after the first in one reply: one call per turn),
  ``repaired_calls`` (calls run after repair against the tool's schema; always 0 unless ``repair_calls`` is on),
  ``empty_messages`` (replies with neither a call nor text), ``parse_failures_<kind>`` per failed call attempt kind
  (malformed_json; invalid_arguments: arguments that are not a JSON object; unknown_tool stays 0, as a call of an
  unknown tool runs and gets tau2's error);
- ``user_turns``, ``user_latency_s`` (total wall-clock time of the user simulator), ``user_prompt_tokens``,
  ``user_completion_tokens``, ``user_cost_usd`` (from the configured prices; 0 for the scripted user);
- ``success`` (0/1: reward within 1e-6 of 1), ``reward``, ``failed_db`` / ``failed_communicate`` (1 when that
  reward component was graded and failed), ``nl_assertions_unchecked`` (NL assertions outside the reward basis);
- ``stop_<reason>`` (one of `STOP_REASONS`, 1 for the reason the episode ended).

The generator prefixes them with ``environment/tau_bench/`` and averages them over episodes.
"""

from __future__ import annotations

from typing import Any

from skyrl_integrations.mcp.metrics import PARSE_FAILURE_KINDS
from skyrl_integrations.tau_bench.reward import RewardResult
from skyrl_integrations.tau_bench.users import UserTurn

STOP_REASONS = ("user_stop", "transfer", "max_turns", "too_many_errors", "user_simulator_failed")
"""How an episode ends: the user said a stop token; the agent called ``transfer_to_human_agents``; the turn cap;
the tool-error cap; the user simulator's endpoint failed (an infrastructure failure, reward 0, kept out of
training by the generator)."""


class EpisodeCounters:
    """The counts of one episode, by metric name (every key of the module doc but the reward ones)."""

    def __init__(self):
        self.values: dict[str, float] = {
            **dict.fromkeys(
                ("turns", "tool_calls", "tool_errors", "skipped_calls", "repaired_calls", "empty_messages"), 0
            ),
            **dict.fromkeys(("user_turns", "user_prompt_tokens", "user_completion_tokens"), 0),
            **dict.fromkeys(("user_latency_s", "user_cost_usd"), 0.0),
            **{f"parse_failures_{kind}": 0 for kind in PARSE_FAILURE_KINDS},
        }

    def add(self, key: str, amount: float = 1) -> None:
        if key not in self.values:
            raise KeyError(f"unknown tau-bench episode counter {key!r}")
        self.values[key] += amount

    def record_user_turn(self, turn: UserTurn) -> None:
        self.add("user_turns")
        self.add("user_latency_s", turn.latency_s)
        self.add("user_prompt_tokens", turn.prompt_tokens)
        self.add("user_completion_tokens", turn.completion_tokens)
        self.add("user_cost_usd", turn.cost_usd)

    def as_metrics(self, result: RewardResult | None, stop_reason: str | None, nl_unchecked: int) -> dict[str, Any]:
        failed = set(result.failed_components) if result is not None else set()
        return {
            **self.values,
            "success": int(result is not None and result.success),
            "reward": result.reward if result is not None else 0.0,
            "failed_db": int("DB" in failed),
            "failed_communicate": int("COMMUNICATE" in failed),
            "nl_assertions_unchecked": nl_unchecked,
            **{f"stop_{reason}": int(reason == stop_reason) for reason in STOP_REASONS},
        }
