"""Acceptance: by default `TauBenchEnv` runs each tool call exactly as written, as official tau2 does, so a call
tau2 rejects is rejected here with tau2's own error; ``repair_calls: true`` repairs such calls against the tool's
schema and counts them."""

from __future__ import annotations

import json

import pytest

FIND_YUSUF = {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}
OFF_SCHEMA_CALLS = [
    pytest.param(
        "Find_User_Id_By_Name_Zip",
        FIND_YUSUF,
        "Error: Tool 'Find_User_Id_By_Name_Zip' not found.",
        ("find_user_id_by_name_zip", "yusuf_rossi_9620"),
        id="name-in-another-case",
    ),
    pytest.param(
        "functions.find_user_id_by_name_zip",
        FIND_YUSUF,
        "Error: Tool 'functions.find_user_id_by_name_zip' not found.",
        ("find_user_id_by_name_zip", "yusuf_rossi_9620"),
        id="functions-prefix",
    ),
    pytest.param(
        "get_order_details",
        {"id": "#W2378156"},
        "Error: RetailTools.get_order_details() got an unexpected keyword argument 'id'",
        ("get_order_details", '"order_id": "#W2378156"'),
        id="id-for-order_id",
    ),
]
"""(name as written, arguments as written, tau2's answer, (the tool it repairs to, a piece of its output))."""


def _call(name: str, arguments: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.mark.parametrize(("name", "arguments", "tau2_error", "repaired"), OFF_SCHEMA_CALLS)
def test_by_default_a_call_off_tau2s_schema_gets_tau2s_error(make_env, name, arguments, tau2_error, repaired):
    env = make_env("retail", "0")
    env.init([])
    out = env.step(_call(name, arguments))
    assert out["observations"] == [{"role": "user", "content": f"Tool error ({name}):\n{tau2_error}"}]
    assert out["metadata"]["tool_call"] == {"name": name, "arguments": arguments, "error": True, "repaired": False}
    metrics = env.get_metrics()
    assert (metrics["tool_calls"], metrics["tool_errors"], metrics["repaired_calls"]) == (1, 1, 0)


@pytest.mark.parametrize(("name", "arguments", "tau2_error", "repaired"), OFF_SCHEMA_CALLS)
def test_with_repair_calls_a_call_off_tau2s_schema_is_repaired_and_counted(
    make_env, name, arguments, tau2_error, repaired
):
    env = make_env("retail", "0", {"repair_calls": True})
    env.init([])
    out = env.step(_call(name, arguments))
    tool, output_piece = repaired
    content = out["observations"][0]["content"]
    assert content.startswith(f"Tool result ({tool}):\n") and output_piece in content
    assert (out["metadata"]["tool_call"]["name"], out["metadata"]["tool_call"]["repaired"]) == (tool, True)
    metrics = env.get_metrics()
    assert (metrics["tool_calls"], metrics["tool_errors"], metrics["repaired_calls"]) == (1, 0, 1)


def test_a_missing_argument_gets_tau2s_error(make_env):
    env = make_env("retail", "0")
    env.init([])
    out = env.step(_call("get_order_details", {}))
    assert out["observations"][0]["content"] == (
        "Tool error (get_order_details):\n"
        "Error: RetailTools.get_order_details() missing 1 required positional argument: 'order_id'"
    )


def test_with_repair_calls_exact_calls_are_not_counted(make_env, gold, replay):
    env = make_env("retail", "0", {"repair_calls": True})
    out = replay(env, gold("retail", "0"), "Done.")
    assert (out["reward"], env.get_metrics()["repaired_calls"]) == (1.0, 0)


def _with_prefixed_write(actions: list[dict]) -> list[dict]:
    """`actions` with its last one, the task's only write, called as ``functions.<name>``."""
    *reads, write = actions
    return [*reads, {"name": "functions." + write["name"], "arguments": write["arguments"]}]


def test_by_default_a_write_tau2_rejects_scores_0(make_env, gold, replay):
    env = make_env("retail", "0")
    out = replay(env, _with_prefixed_write(gold("retail", "0")), "Done.")
    assert (out["reward"], out["metadata"]["reward_components"]) == (0.0, {"DB": 0.0, "COMMUNICATE": 1.0})


def test_with_repair_calls_a_repaired_write_scores_1(make_env, gold, replay):
    env = make_env("retail", "0", {"repair_calls": True})
    out = replay(env, _with_prefixed_write(gold("retail", "0")), "Done.")
    assert (out["reward"], env.get_metrics()["repaired_calls"]) == (1.0, 1)


def test_text_beside_a_tool_call_counts_for_communicate_as_in_tau2(make_env, gold, replay):
    actions = gold("retail", "2")
    env = make_env("retail", "2")
    env.init([])
    for action in actions[:-1]:
        env.step(_call(action["name"], action["arguments"]))
    env.step("You will get 10 items back. " + _call(actions[-1]["name"], actions[-1]["arguments"]))
    out = env.step("Your refund is on its way.")
    assert (out["reward"], out["metadata"]["reward_components"]) == (1.0, {"DB": 1.0, "COMMUNICATE": 1.0})
