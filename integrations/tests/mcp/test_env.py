"""`MCPToolEnv` episodes with scripted model replies against the SDK toy server (a real process over stdio)."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

import skyrl_gym
from skyrl_gym import InfraFailureReason
from skyrl_integrations.mcp.config import LAST_TURN_NOTE
from skyrl_integrations.mcp.env import MCPToolEnv

PROMPT = [{"role": "system", "content": "You are a calculator."}, {"role": "user", "content": "What is 2 + 3?"}]
ADD_2_3 = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
ADD_TRUTH = {
    "task_id": "toy-0001",
    "complexity": "single",
    "max_turns": 3,
    "success": {"must_call_tool": True, "expected_answer": "5", "answer_match": "numeric"},
    "tool_sequence": [{"step": 1, "server": "toy", "tool": "add", "params": {"a": 2, "b": 3}}],
    "limits": {"max_servers": 1, "max_tools": 2},
}


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture
def make_env(toy_spec):
    """Factory: `make_env(ground_truth=ADD_TRUTH, max_turns=5, **env_config)`, an env over the toy server."""

    def make(ground_truth=ADD_TRUTH, max_turns: int = 5, **env_config) -> MCPToolEnv:
        spec = toy_spec()
        config = {"servers": [{"name": "toy", "command": list(spec.command)}], "call_timeout_s": 1, **env_config}
        extras = {
            "reward_spec": {"method": "rule", "ground_truth": ground_truth},
            "extra_info": {"servers": ["toy"], "split": "train", "index": 0},
            "max_turns": max_turns,
        }
        return skyrl_gym.make("mcp_tool", env_config=config, extras=extras)

    return make


def started(env: MCPToolEnv) -> MCPToolEnv:
    env.init(PROMPT)
    return env


# ------------------------------------------------------------------------------------------- registration


def test_make_finds_the_env_through_its_entry_point(make_env):
    assert type(make_env()) is MCPToolEnv


# --------------------------------------------------------------------------------------------------- init


def test_init_keeps_the_dataset_system_text_and_adds_tools_and_call_format(make_env):
    messages, info = make_env(allowed_tools=["add", "echo"]).init(PROMPT)
    system = messages[0]["content"]
    assert messages[0]["role"] == "system" and system.startswith("You are a calculator.\n\n")
    assert "- echo(text: string): Return the text unchanged." in system
    assert "- add(a: number, b: number): Add two numbers." in system
    assert (
        'To call a tool, write one JSON object between <tool_call> and </tool_call>, with the key "name" (one of the '
        'tools above) and the key "arguments" (an object of its arguments).\nYou may make up to 4 calls in one reply'
    ) in system
    assert "<tool name>" not in system and "<arguments as JSON>" not in system
    assert messages[1:] == PROMPT[1:]
    assert info == {"tools": ["echo", "add"]}


def test_demonstrations_go_between_the_system_prompt_and_the_task(make_env):
    demo = [{"role": "user", "content": "What is 1 + 1?"}, {"role": "assistant", "content": call("add", a=1, b=1)}]
    messages, _ = make_env(demonstrations=demo).init(PROMPT)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1:3] == demo
    assert messages[3] == PROMPT[1]


def test_an_allowed_tool_the_servers_do_not_offer_fails_init(make_env):
    with pytest.raises(ValueError, match=r"allowed tools \['transfer_funds'\] are not offered"):
        make_env(allowed_tools=["add", "transfer_funds"]).init(PROMPT)


def test_a_row_without_ground_truth_is_rejected(toy_spec):
    with pytest.raises(ValueError, match="reward_spec.ground_truth"):
        MCPToolEnv({"servers": ["market"]}, {"reward_spec": {"method": "rule"}})


# ------------------------------------------------------------------------------------------------ episodes


def test_correct_call_then_answer_earns_reward_one(make_env):
    env = started(make_env())
    first = env.step(ADD_2_3)
    assert (first["done"], first["reward"]) == (False, 0.0)
    assert first["observations"] == [{"role": "user", "content": "Tool result (add):\n5.0"}]
    last = env.step("2 + 3 = 5")
    assert (last["done"], last["reward"], last["observations"]) == (True, 1.0, [])
    assert last["metadata"]["done_reason"] == "final_answer"
    assert env.get_metrics()["success"] == 1


def test_answer_without_a_call_gets_no_credit_when_a_call_is_required(make_env):
    out = started(make_env()).step("The answer is 5.")
    assert (out["done"], out["reward"]) == (True, 0.0)


def test_a_malformed_call_gets_a_hint_and_the_episode_goes_on(make_env):
    env = started(make_env())
    out = env.step('<tool_call>{"name": add}</tool_call>')
    assert out["done"] is False
    hint = out["observations"][0]["content"]
    assert hint.startswith("Your tool call could not be used (malformed_json): ")
    assert "<tool_call>{" not in hint  # nothing a model could copy as its next (malformed) call
    assert out["metadata"]["parse_failure"] == "malformed_json"
    assert env.get_metrics()["parse_failures_malformed_json"] == 1


def test_parse_failures_are_counted_per_kind(make_env):
    env = started(make_env(max_turns=5))
    env.step(call("multiply", a=2, b=3))
    env.step(call("add", a=2))
    env.step(call("add", a=2))
    metrics = env.get_metrics()
    assert (metrics["parse_failures_unknown_tool"], metrics["parse_failures_invalid_arguments"]) == (1, 2)
    assert (metrics["parse_failures_malformed_json"], metrics["tool_calls"]) == (0, 0)


@pytest.mark.parametrize("strict", [False, True])
def test_strict_arguments_refuses_a_call_padded_with_an_argument_the_tool_does_not_take(make_env, strict):
    env = started(make_env(strict_arguments=strict))
    out = env.step(call("add", a=2, b=3, date_time="2024-01-01"))
    content = out["observations"][0]["content"]
    if strict:
        assert content.startswith(
            "Your tool call could not be used (invalid_arguments): tool 'add': unknown argument 'date_time' "
            "(arguments: a, b)"
        )
        assert (env.get_metrics()["tool_calls"], env.get_metrics()["parse_failures_invalid_arguments"]) == (0, 1)
    else:  # the toy server's SDK-generated schema leaves extra arguments open and the server drops them
        assert content == "Tool result (add):\n5.0"


def test_several_calls_in_one_reply_are_all_run(make_env):
    out = started(make_env()).step(call("echo", text="a") + call("add", a=1, b=1))
    assert out["observations"][0]["content"] == "Tool result (echo):\na\n\nTool result (add):\n2.0"


def test_calls_beyond_max_calls_per_turn_are_skipped_and_counted(make_env):
    env = started(make_env(max_calls_per_turn=1))
    out = env.step(call("echo", text="a") + call("echo", text="b"))
    assert out["observations"][0]["content"] == (
        "Tool result (echo):\na\n\nOnly 1 tool call(s) run per reply; 1 more skipped."
    )
    assert (env.get_metrics()["tool_calls"], env.get_metrics()["skipped_calls"]) == (1, 1)


def test_a_tool_error_is_shown_to_the_model_and_counted(make_env):
    env = started(make_env())
    out = env.step(call("fail", message="bad input"))
    assert out["observations"][0]["content"] == "Tool error (fail): bad input"
    assert env.get_metrics()["tool_errors"] == 1


@pytest.mark.parametrize(("b", "reward"), [(3, 1.0), (4, 0.0)])
def test_a_step_with_result_contains_counts_only_a_call_whose_output_contains_it(make_env, b, reward):
    # `b` is free text here: only the server's output (2 + b) tells a right call from a wrong one
    free_text = {**ADD_TRUTH["tool_sequence"][0], "params": {}, "result_contains": "5.0"}
    env = started(make_env({**ADD_TRUTH, "tool_sequence": [free_text]}, reward_weights={"answer": 0, "format": 0}))
    env.step(call("add", a=2, b=b))
    assert env.step("done")["reward"] == pytest.approx(reward)


def test_max_turns_ends_the_episode_with_partial_credit(make_env):
    env = started(make_env(max_turns=2))
    first = env.step(ADD_2_3)
    assert first["observations"][0]["content"].endswith(LAST_TURN_NOTE)
    last = env.step(ADD_2_3)
    assert (last["done"], last["metadata"]["done_reason"]) == (True, "max_turns")
    assert last["reward"] == pytest.approx(0.5 / 1.0)  # format 0.1 + tools 0.2 + params 0.2, no answer


@pytest.mark.parametrize("note", ["Answer now.", ""])
def test_the_last_turn_note_is_configurable_and_can_be_left_out(make_env, note):
    env = started(make_env(max_turns=2, last_turn_note=note))
    content = env.step(ADD_2_3)["observations"][0]["content"]
    assert content.endswith("Answer now.") if note else (content == "Tool result (add):\n5.0")
    assert LAST_TURN_NOTE not in content


def test_reward_weights_from_the_env_config_score_the_episode(make_env):
    env = started(make_env(max_turns=2, reward_weights={"format": 0, "answer": 0.8}))
    env.step(ADD_2_3)
    last = env.step(ADD_2_3)
    assert last["reward"] == pytest.approx((0.2 + 0.2) / 1.2)  # tools + params, no answer; format weighs nothing


def test_the_tasks_max_turns_caps_the_generators(make_env):
    assert make_env(max_turns=10).max_turns == 3  # ADD_TRUTH.max_turns


def test_a_terminal_tool_ends_the_episode_and_its_arguments_are_the_answer(make_env):
    env = started(make_env(terminal_tools=["echo"]))
    env.step(ADD_2_3)
    out = env.step(call("echo", text="5"))
    assert (out["done"], out["metadata"]["done_reason"], out["reward"]) == (True, "terminal_tool", 1.0)


def test_the_async_hooks_run_an_episode_on_the_callers_loop(make_env):
    env = make_env()

    async def episode():
        await env.init_async(PROMPT)
        await env.step_async(ADD_2_3)
        return await env.step_async("5")

    assert asyncio.run(episode())["reward"] == 1.0


# ------------------------------------------------------------------------------------------ failures


def test_a_hung_tool_times_out_and_the_episode_continues(make_env):
    env = started(make_env())
    out = env.step(call("sleep", seconds=30))
    assert out["done"] is False
    assert out["observations"][0]["content"].startswith("Tool error (sleep): Tool 'sleep' timed out after 1s.")
    assert "infra_failure" not in out
    assert (env.get_metrics()["tool_timeouts"], env.get_metrics()["tool_errors"]) == (1, 1)
    assert env.step(ADD_2_3)["observations"][0]["content"].startswith("Tool result (add):\n5.0")


def test_a_cancelled_step_leaves_the_env_usable(make_env):
    env = started(make_env(call_timeout_s=20))

    async def cancelled_then_next():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(env.step_async(call("sleep", seconds=30)), 0.5)
        return await env.step_async(ADD_2_3)

    start = time.monotonic()
    assert asyncio.run(cancelled_then_next())["observations"][0]["content"].startswith("Tool result (add):\n5.0")
    assert time.monotonic() - start < 10


def test_a_one_megabyte_output_is_truncated_in_the_observation(make_env):
    env = started(make_env(max_output_chars=4000))
    content = env.step(call("big", n=1_048_576))["observations"][0]["content"]
    assert content == "Tool result (big):\n" + "x" * 4000 + "\n...[truncated 1048576 -> 4000 chars]"
    assert env.get_metrics()["truncated_outputs"] == 1
    assert "infra_failure" not in env.step(ADD_2_3)


def test_a_server_crash_is_an_error_observation_flagged_as_an_infra_failure(make_env):
    env = started(make_env())
    out = env.step(call("crash"))
    assert out["done"] is False
    assert out["observations"][0]["content"].startswith("Tool error (crash): Tool 'crash' failed: the tool server")
    assert out["infra_failure"].reason == InfraFailureReason.TOOL_SERVER_FAILED
    assert out["infra_failure"].error == out["observations"][0]["content"].removeprefix("Tool error (crash): ")
    assert env.get_metrics()["server_crashes"] == 1


def test_after_a_crash_the_episode_and_the_next_one_get_a_restarted_server(make_env):
    env = started(make_env())
    crashed_pid = env.step(call("pid"))["observations"][0]["content"]
    env.step(call("crash"))
    assert env.step(call("pid"))["observations"][0]["content"] != crashed_pid
    following = started(make_env())
    assert following.step(ADD_2_3)["observations"][0]["content"] == "Tool result (add):\n5.0"


def test_closing_an_env_keeps_the_server_for_the_next_episode(make_env):
    env = started(make_env())
    pid = env.step(call("pid"))["observations"][0]["content"]
    env.close()
    assert started(make_env()).step(call("pid"))["observations"][0]["content"] == pid


# --------------------------------------------------------------------------------------------- metrics


def test_metrics_of_an_episode(make_env):
    env = started(make_env())
    env.step(call("add", a=2))
    env.step(ADD_2_3)
    env.step("It is 5.")
    assert env.get_metrics() == {
        "turns": 3,
        "tool_calls": 1,
        "tool_errors": 0,
        "tool_timeouts": 0,
        "server_crashes": 0,
        "truncated_outputs": 0,
        "skipped_calls": 0,
        "parse_failures_malformed_json": 0,
        "parse_failures_unknown_tool": 0,
        "parse_failures_invalid_arguments": 1,
        "success": 1,
        "reward": 1.0,
    }


def test_aggregate_metrics_average_and_add_the_error_rate():
    episodes = [{"tool_calls": 3, "tool_errors": 1, "success": 1}, {"tool_calls": 1, "tool_errors": 1, "success": 0}]
    assert MCPToolEnv.aggregate_metrics(episodes) == {
        "tool_calls": 2.0,
        "tool_errors": 1.0,
        "success": 0.5,
        "tool_error_rate": 0.5,
    }


def test_env_config_typo_is_rejected_naming_the_key():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['call_timeout'\]"):
        MCPToolEnv({"servers": ["market"], "call_timeout": 5}, {"reward_spec": {"ground_truth": ADD_TRUTH}})


def test_a_row_naming_an_unknown_server_is_rejected():
    extras = {"reward_spec": {"ground_truth": ADD_TRUTH}, "extra_info": {"servers": ["weather"]}}
    with pytest.raises(ValueError, match="extra_info.servers: unknown bundled MCP server 'weather'"):
        MCPToolEnv({}, extras)


def test_config_servers_may_be_a_mapping(toy_spec):
    command = [sys.executable, "-c", "pass"]
    env = MCPToolEnv({"servers": {"toy": {"command": command}}}, {"reward_spec": {"ground_truth": ADD_TRUTH}})
    assert [g.spec.command for g in env.groups] == [tuple(command)]
