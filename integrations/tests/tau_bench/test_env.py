"""`TauBenchEnv` episode mechanics: parsing, one call per turn, termination, caps, the COMMUNICATE component,
copy-on-write DB, determinism with the scripted user, config and row validation."""

from __future__ import annotations

import re

import pytest

import skyrl_gym
from skyrl_integrations.tau_bench.env import TauBenchEnv
from skyrl_integrations.tau_bench.prompt import CALL_FORMAT
from skyrl_integrations.tau_bench.users import GREETING

FIND_YUSUF = '<tool_call>{"name": "find_user_id_by_name_zip", "arguments": {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}}</tool_call>'  # noqa: E501


def test_the_env_id_is_registered_through_the_entry_point():
    env = skyrl_gym.make("tau_bench", env_config={}, extras={"extra_info": {"domain": "airline", "task_id": "0"}})
    assert isinstance(env, TauBenchEnv)


def test_init_builds_policy_tools_greeting_and_the_users_opening(make_env):
    env = make_env("retail", "0", {"user": {"kind": "scripted", "opening": "I want to exchange two items."}})
    messages, info = env.init([{"role": "system", "content": "You are the retail agent."}])
    assert [m["role"] for m in messages] == ["system", "assistant", "user"]
    system = messages[0]["content"]
    assert system.startswith("You are the retail agent.\n\nFollow this policy:\n<policy>\n# Retail agent policy")
    assert '"name": "exchange_delivered_order_items"' in system and system.endswith(CALL_FORMAT)
    assert messages[1:] == [
        {"role": "assistant", "content": GREETING},
        {"role": "user", "content": "I want to exchange two items."},
    ]
    assert len(info["tools"]) == 15 and info["domain"] == "retail"


def test_the_policy_can_be_left_out_for_small_contexts(make_env):
    messages, _ = make_env("retail", "0", {"include_policy": False, "tool_prompt": "compact"}).init([])
    assert "<policy>" not in messages[0]["content"]
    assert "- get_order_details(order_id: string): Get the status and details of an order." in messages[0]["content"]
    assert len(messages[0]["content"]) < 3000


def test_a_tool_call_answers_with_the_official_output(make_env):
    env = make_env("retail", "0")
    env.init([])
    out = env.step(FIND_YUSUF)
    assert out["observations"] == [
        {"role": "user", "content": "Tool result (find_user_id_by_name_zip):\nyusuf_rossi_9620"}
    ]
    assert (out["done"], out["reward"]) == (False, 0.0)
    out = env.step('<tool_call>{"name": "get_user_details", "arguments": {"user_id": "nobody_1"}}</tool_call>')
    assert out["observations"][0]["content"] == "Tool error (get_user_details):\nError: User not found"
    metrics = env.get_metrics()
    assert (metrics["tool_calls"], metrics["tool_errors"], metrics["turns"]) == (2, 1, 2)


def test_reads_share_the_pristine_db_and_the_first_write_copies_it(make_env, gold):
    env = make_env("retail", "0")
    env.init([])
    for action in gold("retail", "0")[:4]:  # find user, order details, two product details: reads only
        env.toolkit.call(action["name"], action["arguments"])
    assert (env.toolkit.copied, env.toolkit.db_hash()) == (False, env.domain.pristine_hash)
    write = gold("retail", "0")[4]
    assert env.toolkit.call(write["name"], write["arguments"]).error is False
    assert env.toolkit.copied and env.toolkit.db_hash() != env.domain.pristine_hash
    assert env.domain.make_toolkit(env.domain.pristine_db).get_db_hash() == env.domain.pristine_hash


def test_only_the_first_of_several_calls_runs(make_env):
    env = make_env("retail", "0")
    env.init([])
    out = env.step(FIND_YUSUF + "\n" + FIND_YUSUF)
    assert out["observations"][0]["content"].endswith("Only one tool call runs per reply; 1 more skipped.")
    assert (env.get_metrics()["tool_calls"], env.get_metrics()["skipped_calls"]) == (1, 1)


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        ('<tool_call>{"name": "find_user_id_by_email", "arguments": {"email": </tool_call>', "malformed_json"),
        ('<tool_call>{"name": "get_order_details", "arguments": ["#W2378156"]}</tool_call>', "invalid_arguments"),
    ],
)
def test_a_failed_call_attempt_gets_a_hint_and_is_counted_per_kind(make_env, reply, kind):
    env = make_env("retail", "0")
    env.init([])
    out = env.step(reply)
    assert out["done"] is False and out["metadata"]["parse_failure"] == kind
    assert out["observations"][0]["content"].startswith(f"Your tool call could not be used ({kind}): ")
    assert out["observations"][0]["content"].endswith(CALL_FORMAT)
    metrics = env.get_metrics()
    assert {k: v for k, v in metrics.items() if k.startswith("parse_failures_") and v} == {f"parse_failures_{kind}": 1}
    assert metrics["tool_calls"] == 0


def test_an_empty_reply_gets_a_hint(make_env):
    env = make_env("retail", "0")
    env.init([])
    out = env.step("   ")
    assert out["observations"][0]["content"] == "Your reply was empty. Call a tool or write a message to the user."
    assert env.get_metrics()["empty_messages"] == 1


def test_the_scripted_user_replies_in_order_then_stops(make_env):
    env = make_env("retail", "0", {"user": {"kind": "scripted", "replies": ["My zip is 19122.", "Yes."]}})
    env.init([])
    assert env.step("What is your zip code?")["observations"] == [{"role": "user", "content": "My zip is 19122."}]
    assert env.step("Shall I proceed?")["observations"] == [{"role": "user", "content": "Yes."}]
    out = env.step("All done.")
    assert (out["done"], out["metadata"]["done_reason"], out["observations"][0]["content"]) == (
        True,
        "user_stop",
        "###STOP###",
    )
    assert out["reward"] == 0.0  # no exchange was made: the DB differs from the gold one
    assert (env.get_metrics()["failed_db"], env.get_metrics()["user_turns"]) == (1, 4)  # the opening + 3 replies


def test_scripted_episodes_are_deterministic(make_env):
    runs = []
    for _ in range(2):
        env = make_env("retail", "0", {"user": {"kind": "scripted", "replies": ["Yes, go ahead."]}})
        messages, _ = env.init([])
        steps = [env.step(m) for m in [FIND_YUSUF, "Confirm?", "Done."]]
        runs.append((messages, [(s["observations"], s["reward"], s["done"]) for s in steps], env.get_metrics()))
    assert runs[0] == runs[1]


def test_communicate_info_must_be_said_to_the_user(make_env, gold, replay):
    env = make_env("retail", "2")
    out = replay(env, gold("retail", "2"), "Your refund is on its way.")
    assert out["metadata"]["reward_components"] == {"DB": 1.0, "COMMUNICATE": 0.0}
    assert (out["reward"], env.get_metrics()["failed_communicate"]) == (0.0, 1)
    env = make_env("retail", "2")
    assert replay(env, gold("retail", "2"), "You will get 10 items back, 1,0 dollars.")["reward"] == 1.0


def test_max_turns_ends_the_episode_with_reward_zero_even_with_the_right_db(make_env, gold, replay):
    actions = gold("retail", "0")
    env = make_env("retail", "0", {"max_turns": len(actions)})
    out = replay(env, actions, "unreached")
    assert (out["done"], out["reward"], out["metadata"]["done_reason"]) == (True, 0.0, "max_turns")
    assert env.get_metrics()["stop_max_turns"] == 1
    env = make_env("retail", "0", max_turns=3)  # the generator's max_turns, smaller than the config's 30
    assert env.max_turns == 3


def test_too_many_tool_errors_end_the_episode(make_env):
    env = make_env("retail", "0", {"max_tool_errors": 2})
    env.init([])
    bad = '<tool_call>{"name": "get_user_details", "arguments": {"user_id": "nobody_1"}}</tool_call>'
    assert env.step(bad)["done"] is False
    out = env.step(bad)
    assert (out["done"], out["reward"], out["metadata"]["done_reason"]) == (True, 0.0, "too_many_errors")


def test_transfer_can_be_left_to_the_user(make_env, gold, as_tool_call):
    env = make_env("retail", "50", {"transfer_ends_episode": False})
    env.init([])
    (transfer,) = gold("retail", "50")
    out = env.step(as_tool_call(transfer))
    assert (out["done"], out["observations"][0]["content"].startswith("Tool result (transfer_to_human_agents):")) == (
        False,
        True,
    )


@pytest.mark.parametrize(
    ("env_config", "message"),
    [
        ({"max_turn": 3}, "environment.skyrl_gym.tau_bench: unknown key(s) ['max_turn']"),
        ({"max_turns": 0}, "environment.skyrl_gym.tau_bench.max_turns: must be an int >= 1, got 0"),
        ({"tool_prompt": "tiny"}, "environment.skyrl_gym.tau_bench.tool_prompt: expected one of"),
        ({"include_policy": "no"}, "environment.skyrl_gym.tau_bench.include_policy: must be true or false, got 'no'"),
        ({"repair_calls": 1}, "environment.skyrl_gym.tau_bench.repair_calls: must be true or false, got 1"),
        ({"user": {"kind": "human"}}, "environment.skyrl_gym.tau_bench.user.kind: expected one of"),
        (
            {"user": {"kind": "llm", "model": "m"}},
            "environment.skyrl_gym.tau_bench.user: kind 'llm' needs ['base_url']",
        ),
        (
            {"user": {"kind": "llm", "model": "m", "base_url": "http://x/v1", "strategy": "oracle"}},
            "environment.skyrl_gym.tau_bench.user.strategy: expected one of",
        ),
        ({"user": {"kind": "scripted", "temperature": 0}}, "unknown key(s) ['temperature']"),
    ],
)
def test_bad_config_is_an_error_naming_the_key(make_env, env_config, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make_env("retail", "0", env_config)


def test_bad_rows_are_errors_naming_the_field(make_env):
    with pytest.raises(ValueError, match=r"extra_info has no \['task_id'\]"):
        make_env("retail", "0", extra_info={"domain": "retail"})
    with pytest.raises(KeyError, match="tau-bench retail: no task with id '9999'"):
        make_env("retail", "9999")
    with pytest.raises(ValueError, match="unknown domain 'telecom'"):
        make_env("telecom", "0")
    truth = {"actions": [], "reward_basis": ["DB", "NL_ASSERTION"]}
    with pytest.raises(ValueError, match=r"reward_basis: \['NL_ASSERTION'\] cannot be graded here"):
        make_env("retail", "0", reward_spec={"ground_truth": truth})
    with pytest.raises(ValueError, match=r"actions\[0\]: expected"):
        make_env("retail", "0", reward_spec={"ground_truth": {"actions": [{"name": "x"}]}})
