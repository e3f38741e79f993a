"""Acceptance: replaying a task's gold actions through `TauBenchEnv`'s text interface (``<tool_call>`` messages read
by the project's parser) runs the same calls with the same answers as official tau2, and the env's reward equals
tau2's own evaluation of the episode (1 on every retail and airline task); one wrong write gives 0 on both sides."""

from __future__ import annotations

from typing import Any

import pytest

from skyrl_integrations.tau_bench.domains import get_domain

FAST_TASKS = [("retail", "0"), ("retail", "10"), ("retail", "41"), ("airline", "7"), ("airline", "13")]
"""A handful per domain for the default suite: an exchange, two transfers, a multi-write, a flight change."""


def _all_tasks() -> list[tuple[str, str]]:
    return [(domain, task_id) for domain in ("retail", "airline") for task_id in get_domain(domain).tasks]


def _exchanges(messages: list[Any]) -> list[tuple[str, dict, str, bool]]:
    """(tool name, arguments, answer, error flag) of each tool call in tau2 `messages`."""
    answers = {m.id: m for m in messages if m.role == "tool"}
    calls = [call for m in messages if m.role == "assistant" for call in m.tool_calls or []]
    return [(c.name, c.arguments, answers[c.id].content, answers[c.id].error) for c in calls]


def _official_exchanges(domain: str, actions: list[dict]) -> list[tuple[str, dict, str, bool]]:
    """The gold actions as official tau2 answers them: one fresh environment from tau2's own constructor."""
    from tau2.data_model.message import ToolCall

    environment = get_domain(domain).make_environment()
    exchanges = []
    for action in actions:
        answer = environment.get_response(ToolCall(name=action["name"], arguments=action["arguments"]))
        exchanges.append((action["name"], action["arguments"], answer.content, answer.error))
    return exchanges


def _tau2_reward(domain: str, task_id: str, messages: list[Any]) -> float:
    """tau2's evaluation of `messages` against the task as tau2 loads it (basis DB x COMMUNICATE in both domains)."""
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    task = get_domain(domain).task(task_id)
    assert [b.value for b in task.evaluation_criteria.reward_basis] == ["DB", "COMMUNICATE"]
    environment = get_domain(domain).make_environment
    db = EnvironmentEvaluator.calculate_reward(environment_constructor=environment, task=task, full_trajectory=messages)
    return db.reward * CommunicateEvaluator.calculate_reward(task=task, full_trajectory=messages).reward


def _check_gold_replay(make_env, gold, replay, domain: str, task_id: str) -> None:
    env = make_env(domain, task_id)
    closing = "Done. " + " ".join(env.ground_truth.communicate_info)
    out = replay(env, gold(domain, task_id), closing)
    assert out["done"] is True
    assert out["metadata"]["done_reason"] in ("user_stop", "transfer")
    assert _exchanges(env.trajectory.messages) == _official_exchanges(domain, gold(domain, task_id))
    assert out["metadata"]["reward_components"] == {"DB": 1.0, "COMMUNICATE": 1.0}
    assert (out["reward"], _tau2_reward(domain, task_id, env.trajectory.messages)) == (1.0, 1.0)
    metrics = env.get_metrics()
    assert metrics["success"] == 1
    assert [key for key, value in metrics.items() if key.startswith("parse_failures_") and value] == []


@pytest.mark.parametrize(("domain", "task_id"), FAST_TASKS)
def test_gold_replay_runs_as_tau2_and_gets_tau2s_full_reward(make_env, gold, replay, domain, task_id):
    _check_gold_replay(make_env, gold, replay, domain, task_id)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 164 tasks, each graded twice and replayed on official environments: minutes
def test_gold_replay_runs_as_tau2_and_gets_tau2s_full_reward_on_every_retail_and_airline_task(make_env, gold, replay):
    tasks = _all_tasks()
    assert len(tasks) == 114 + 50
    for domain, task_id in tasks:
        _check_gold_replay(make_env, gold, replay, domain, task_id)


@pytest.mark.parametrize(
    ("domain", "task_id", "index", "right", "wrong"),
    [
        # modify_pending_order_items of an order paid with PayPal, charged to the user's credit card instead
        ("retail", "41", 9, {"payment_method_id": "paypal_4768213"}, {"payment_method_id": "credit_card_9503061"}),
        # update_reservation_flights of XEHM4B paid with the user's other credit card
        ("airline", "7", 2, {"payment_id": "credit_card_2408938"}, {"payment_id": "credit_card_4303738"}),
    ],
)
def test_one_wrong_write_gets_zero_db_reward(make_env, gold, replay, domain, task_id, index, right, wrong):
    actions = gold(domain, task_id)
    assert {k: actions[index]["arguments"][k] for k in right} == right
    actions[index] = {"name": actions[index]["name"], "arguments": {**actions[index]["arguments"], **wrong}}
    env = make_env(domain, task_id)
    out = replay(env, actions, "Done. " + " ".join(env.ground_truth.communicate_info))
    assert out["metadata"]["done_reason"] == "user_stop"
    assert env.get_metrics()["tool_errors"] == 0  # the wrong write went through: it changed the DB differently
    assert (out["reward"], out["metadata"]["reward_components"]["DB"]) == (0.0, 0.0)
    assert _tau2_reward(domain, task_id, env.trajectory.messages) == 0.0
    assert env.get_metrics()["failed_db"] == 1
