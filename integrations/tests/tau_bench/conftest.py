"""Fixtures shared by the tau-bench tests.

- ``make_env(domain, task_id, env_config=None, **extras)``: a `TauBenchEnv` for one task.
- ``gold(domain, task_id)``: the task's gold actions as ``{"name", "arguments"}``.
- ``as_tool_call(action)``: an action as the agent writes it, one ``<tool_call>`` block.
- ``replay(env, actions, closing)``: `init`, each action as a ``<tool_call>`` message through the env's parser, then
  `closing` as a message to the user; returns the last step's output (earlier if a step ends the episode).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from skyrl_integrations.tau_bench.domains import get_domain
from skyrl_integrations.tau_bench.env import TauBenchEnv


def tool_call_message(action: Mapping[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": action["name"], "arguments": action["arguments"]}) + "</tool_call>"


def _replay(env: TauBenchEnv, actions: Iterable[Mapping[str, Any]], closing: str) -> dict[str, Any]:
    env.init([])
    for action in actions:
        out = env.step(tool_call_message(action))
        if out["done"]:
            return out
    return env.step(closing)


def _gold(domain: str, task_id: str) -> list[dict[str, Any]]:
    task = get_domain(domain).task(task_id)
    return [{"name": a.name, "arguments": a.arguments} for a in task.evaluation_criteria.actions]


@pytest.fixture
def make_env():
    def make(domain: str, task_id: str, env_config: Mapping[str, Any] | None = None, **extras) -> TauBenchEnv:
        extras.setdefault("extra_info", {"domain": domain, "task_id": task_id})
        return TauBenchEnv(dict(env_config or {}), extras)

    return make


@pytest.fixture
def gold():
    return _gold


@pytest.fixture
def replay():
    return _replay


@pytest.fixture
def as_tool_call():
    return tool_call_message
