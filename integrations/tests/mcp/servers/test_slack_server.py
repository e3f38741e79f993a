"""The Slack MCP server in offline mode, as a real process over stdio, plus its deterministic seed workspace."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import pytest
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

from skyrl_integrations.mcp.servers.slack.seed import build_workspace

INC_119 = {
    "ts": "1719590759.000230",
    "time": "2024-06-28 16:05 UTC",
    "user": "U03CAROL",
    "text": "INC-119 (SEV2): billing error rate is at 5%. Investigating.",
    "reply_count": 2,
}
GENERAL_NEWEST = {
    "ts": "1719566131.000223",
    "time": "2024-06-28 09:15 UTC",
    "user": "U05ERIN",
    "text": "The Q3 planning doc is open for comments until Thursday.",
}
VANDELAY_DEAL_TS = "1717519045.000019"


async def call(stdio_server, call_tool, name: str, arguments: dict):
    async with stdio_server("slack") as client:
        return await call_tool(client, name, arguments)


@dataclass
class SharedServer:
    client: Any
    run: Callable[[Coroutine], Any]  # runs a coroutine on the loop that owns the client and returns its result


@pytest.fixture(scope="module")
def shared():
    """One offline Slack process for the read-only tests of this module (starting a process per test is slow).

    The client stays open inside a background thread's event loop (anyio needs it entered and left by one task);
    tests hand their coroutines to that loop.
    """
    loop = asyncio.new_event_loop()
    opened: concurrent.futures.Future = concurrent.futures.Future()

    async def hold_open() -> None:
        stop = asyncio.Event()
        try:
            params = StdioServerParameters(command=sys.executable, args=["-m", "skyrl_integrations.mcp.servers.slack"])
            async with Client(params, read_timeout_seconds=30) as client:
                opened.set_result((client, stop))
                await stop.wait()
        except BaseException as exc:
            if not opened.done():
                opened.set_exception(exc)
            raise

    thread = threading.Thread(target=loop.run_until_complete, args=(hold_open(),), daemon=True)
    thread.start()
    client, stop = opened.result(timeout=60)
    yield SharedServer(client, lambda coro: asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60))
    loop.call_soon_threadsafe(stop.set)
    thread.join(timeout=30)
    loop.close()


def ask(shared: SharedServer, call_tool, name: str, arguments: dict):
    return shared.run(call_tool(shared.client, name, arguments))


def test_seed_workspace_has_fixed_size_and_content():
    workspace = build_workspace()
    top_level = [message for message in workspace.messages if message.thread_ts is None]
    assert (len(workspace.users), len(workspace.channels), len(workspace.messages), len(top_level)) == (11, 6, 236, 160)
    first = workspace.messages[0]
    assert (first.channel, first.ts, first.user, first.text) == (
        "C03DEPLOYS",
        "1717407812.000000",
        "U10DEPLOYBOT",
        "Deployed web-app v2.9.0 to staging (triggered by @carol).",
    )


def test_seed_replies_point_at_an_earlier_top_level_message_of_their_channel():
    messages = build_workspace().messages
    parents = {(message.channel, message.ts) for message in messages if message.thread_ts is None}
    replies = [message for message in messages if message.thread_ts is not None]
    assert len(replies) == 76
    assert all((reply.channel, reply.thread_ts) in parents and reply.thread_ts < reply.ts for reply in replies)


def test_lists_the_six_channels_by_name(shared, call_tool):
    assert ask(shared, call_tool, "list_channels", {}) == (
        False,
        {
            "channels": [
                {"id": "C03DEPLOYS", "name": "deploys", "topic": "Staging and production deploy log", "members": 6},
                {"id": "C02ENGINEERING", "name": "engineering", "topic": "Pull requests, RFCs and technical discussion", "members": 6},  # fmt: skip
                {"id": "C01GENERAL", "name": "general", "topic": "Company-wide announcements", "members": 11},
                {"id": "C04INCIDENTS", "name": "incidents", "topic": "Active incidents and their resolution", "members": 6},  # fmt: skip
                {"id": "C06RANDOM", "name": "random", "topic": "Lunch, pets and everything else", "members": 11},
                {"id": "C05SALES", "name": "sales", "topic": "Deals, pipeline and customer updates", "members": 4},
            ]
        },
    )


def test_read_channel_returns_the_newest_top_level_messages_first(shared, call_tool):
    result = ask(shared, call_tool, "read_channel", {"channel": "#incidents", "limit": 2})
    assert result == (
        False,
        {
            "channel": "incidents",
            "messages": [
                INC_119,
                {
                    "ts": "1719578691.000226",
                    "time": "2024-06-28 12:44 UTC",
                    "user": "U03CAROL",
                    "text": "INC-118 (SEV2): search is failing health checks. Investigating.",
                    "reply_count": 2,
                },
            ],
            "has_more": True,
        },
    )


def test_read_channel_accepts_a_channel_id(shared, call_tool):
    result = ask(shared, call_tool, "read_channel", {"channel": "C04INCIDENTS", "limit": 1})
    assert result == (False, {"channel": "incidents", "messages": [INC_119], "has_more": True})


def test_read_thread_returns_the_parent_then_its_replies(shared, call_tool):
    result = ask(shared, call_tool, "read_thread", {"channel": "sales", "ts": VANDELAY_DEAL_TS})
    assert result == (
        False,
        {
            "channel": "sales",
            "messages": [
                {"ts": VANDELAY_DEAL_TS, "time": "2024-06-04 16:37 UTC", "user": "U08HENRY", "text": "Closed Vandelay Imports: $80k ARR on the Starter plan."},  # fmt: skip
                {"ts": "1717521584.000021", "time": "2024-06-04 17:19 UTC", "user": "U01ALICE", "text": "Great work!"},
            ],
        },
    )


def test_search_matches_messages_containing_every_word(shared, call_tool):
    result = ask(shared, call_tool, "search_messages", {"query": "Billing PRODUCTION"})
    assert result == (
        False,
        {
            "query": "Billing PRODUCTION",
            "total": 2,
            "matches": [
                {"channel": "deploys", "ts": "1719313452.000197", "time": "2024-06-25 11:04 UTC", "user": "U10DEPLOYBOT", "text": "Deployed billing v3.6.1 to production (triggered by @alice)."},  # fmt: skip
                {"channel": "deploys", "ts": "1718705666.000131", "time": "2024-06-18 10:14 UTC", "user": "U10DEPLOYBOT", "text": "Deployed billing v3.5.1 to production (triggered by @dave)."},  # fmt: skip
            ],
        },
    )


def test_search_in_one_channel_marks_thread_replies_with_their_thread(shared, call_tool):
    is_error, found = ask(shared, call_tool, "search_messages", {"query": "root cause", "channel": "incidents"})
    assert (is_error, found["total"], len(found["matches"])) == (False, 19, 19)
    assert found["matches"][0] == {
        "channel": "incidents",
        "ts": "1719592395.000231",
        "time": "2024-06-28 16:33 UTC",
        "user": "U02BOB",
        "text": "Root cause: a retry storm from a misconfigured client.",
        "thread_ts": INC_119["ts"],
    }


async def test_posted_message_is_the_newest_of_its_channel_for_later_calls(stdio_server, call_tool):
    async with stdio_server("slack") as client:
        posted = await call_tool(client, "post_message", {"channel": "general", "text": "Deploy freeze starts Friday."})
        read = await call_tool(client, "read_channel", {"channel": "general", "limit": 1})
    assert posted == (False, {"ok": True, "channel": "general", "ts": "1719596357.000236"})
    assert read == (
        False,
        {
            "channel": "general",
            "messages": [
                {"ts": "1719596357.000236", "time": "2024-06-28 17:39 UTC", "user": "U11ASSISTANT", "text": "Deploy freeze starts Friday."},  # fmt: skip
            ],
            "has_more": True,
        },
    )


async def test_posted_messages_do_not_survive_a_server_restart(stdio_server, call_tool):
    async with stdio_server("slack") as client:
        await call_tool(client, "post_message", {"channel": "general", "text": "Only in this process."})
    restarted = await call(stdio_server, call_tool, "read_channel", {"channel": "general", "limit": 1})
    assert restarted == (False, {"channel": "general", "messages": [GENERAL_NEWEST], "has_more": True})


async def test_reply_in_a_thread_is_counted_and_shown_in_the_thread(stdio_server, call_tool):
    reply = {"channel": "sales", "text": "Invoice sent.", "thread_ts": VANDELAY_DEAL_TS}
    async with stdio_server("slack") as client:
        posted = await call_tool(client, "post_message", reply)
        _, thread = await call_tool(client, "read_thread", {"channel": "sales", "ts": VANDELAY_DEAL_TS})
    assert posted == (
        False,
        {"ok": True, "channel": "sales", "ts": "1719596357.000236", "thread_ts": VANDELAY_DEAL_TS},
    )
    assert [(message["user"], message["text"]) for message in thread["messages"]] == [
        ("U08HENRY", "Closed Vandelay Imports: $80k ARR on the Starter plan."),
        ("U01ALICE", "Great work!"),
        ("U11ASSISTANT", "Invoice sent."),
    ]


def test_reply_to_a_message_that_does_not_exist_is_an_error(shared, call_tool):
    reply = {"channel": "sales", "text": "Hello?", "thread_ts": "1700000000.000000"}
    assert ask(shared, call_tool, "post_message", reply) == (
        True,
        "Error executing tool post_message: No top-level message with ts '1700000000.000000' in #sales to reply to",
    )


@pytest.mark.parametrize("user", ["U02BOB", "bob", "@Bob", "bob martinez"])
def test_get_user_by_id_handle_or_full_name(shared, call_tool, user):
    assert ask(shared, call_tool, "get_user", {"user": user}) == (
        False,
        {
            "id": "U02BOB",
            "name": "bob",
            "real_name": "Bob Martinez",
            "title": "Backend Engineer",
            "tz": "America/New_York",
            "is_bot": False,
        },
    )


def test_unknown_channel_error_lists_the_channels(shared, call_tool):
    assert ask(shared, call_tool, "read_channel", {"channel": "#ops"}) == (
        True,
        "Error executing tool read_channel: Unknown channel '#ops'. "
        "Valid channels include: deploys, engineering, general, incidents, random, sales",
    )


def test_unknown_user_error_lists_some_users(shared, call_tool):
    assert ask(shared, call_tool, "get_user", {"user": "zoe"}) == (
        True,
        "Error executing tool get_user: Unknown user 'zoe'. "
        "Valid users include: alice, assistant, bob, carol, dave, deploybot, erin, frank, ...",
    )


def test_limit_below_one_is_rejected(shared, call_tool):
    assert ask(shared, call_tool, "read_channel", {"channel": "general", "limit": 0}) == (
        True,
        "Error executing tool read_channel: limit must be at least 1, got 0",
    )


def test_blank_search_query_is_rejected(shared, call_tool):
    assert ask(shared, call_tool, "search_messages", {"query": "   "}) == (
        True,
        "Error executing tool search_messages: The search query is empty: give one or more words to look for",
    )


def test_live_mode_without_a_token_exits_2_naming_the_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SLACK_BOT_TOKEN", "SKYRL_DOTENV")}
    result = subprocess.run(
        [sys.executable, "-m", "skyrl_integrations.mcp.servers.slack", "--mode", "live"],
        env=env,
        cwd=tmp_path,  # no .env here
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "error: the slack server's live mode needs SLACK_BOT_TOKEN" in result.stderr
