"""The python MCP server as a real process over stdio: results, limits, isolation and start-up configuration.
The sandbox's own attack tests are in tests/security/test_sandbox.py."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time

import pytest

MODULE = "skyrl_integrations.mcp.servers.python"


async def run_python(stdio_server, call_tool, arguments: dict, env: dict[str, str] | None = None):
    async with stdio_server("python", env=env) as client:
        return await call_tool(client, "run_python", arguments)


def start_server_process(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """Start the server with stdin at EOF: it builds (and logs), then its stdio transport ends at once."""
    return subprocess.run(
        [sys.executable, "-m", MODULE, *args],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def local_http_server():
    """An HTTP server on localhost that answers 200; yields (url, list of paths it was asked for)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"reachable")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", seen
    server.shutdown()
    server.server_close()


async def test_lists_run_python_with_code_required_and_timeout_optional(stdio_server):
    async with stdio_server("python") as client:
        tools = (await client.list_tools()).tools
    assert [tool.name for tool in tools] == ["run_python"]
    assert tools[0].input_schema["required"] == ["code"]
    assert sorted(tools[0].input_schema["properties"]) == ["code", "timeout_s"]


async def test_successful_program_returns_its_stdout_and_exit_code_zero(stdio_server, call_tool):
    result = await run_python(stdio_server, call_tool, {"code": "print(6 * 7)"})
    assert result == (False, {"exit_code": 0, "stdout": "42\n", "stderr": ""})


async def test_raising_program_is_an_error_result_with_its_output_and_traceback(stdio_server, call_tool):
    code = "print('before')\nraise ValueError('boom')"
    is_error, text = await run_python(stdio_server, call_tool, {"code": code})
    assert is_error
    assert text.startswith('{"exit_code":1,"stdout":"before\\n","stderr":"Traceback (most recent call last):')
    assert text.endswith('ValueError: boom\\n"}')


async def test_request_to_a_local_http_server_fails_inside_the_sandbox(stdio_server, call_tool, local_http_server):
    url, seen = local_http_server
    code = f"import urllib.request\nprint(urllib.request.urlopen({url!r}, timeout=5).read())"
    is_error, text = await run_python(stdio_server, call_tool, {"code": code})
    assert is_error
    assert "urllib.error.URLError: <urlopen error network access is disabled in this sandbox>" in text
    assert seen == []


async def test_the_network_namespace_also_cuts_off_child_processes_that_escape_the_audit_hook(
    stdio_server, call_tool, local_http_server
):
    url, seen = local_http_server
    child = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)"
    code = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {child!r}], check=True)"
    is_error, text = await run_python(stdio_server, call_tool, {"code": code})
    assert is_error
    assert "urllib.error.URLError: <urlopen error [Errno 101] Network is unreachable>" in text
    assert seen == []


async def test_allow_network_lets_programs_reach_a_local_http_server(stdio_server, call_tool, local_http_server):
    url, seen = local_http_server
    code = f"import urllib.request\nprint(urllib.request.urlopen({url!r}, timeout=5).read())"
    env = {"SKYRL_PYTHON_ALLOW_NETWORK": "1"}
    result = await run_python(stdio_server, call_tool, {"code": code}, env=env)
    assert result == (False, {"exit_code": 0, "stdout": "b'reachable'\n", "stderr": ""})
    assert seen == ["/"]


async def test_allocating_2_gb_fails_cleanly_at_the_memory_limit(stdio_server, call_tool):
    env = {"SKYRL_PYTHON_MEMORY_MB": "256"}
    is_error, text = await run_python(stdio_server, call_tool, {"code": "data = bytearray(2 * 1024**3)"}, env=env)
    assert is_error
    assert text.endswith('MemoryError\\n","error":"MemoryError: the code exceeded the memory limit of 256 MB"}')


async def test_endless_loop_is_killed_at_the_requested_timeout(stdio_server, call_tool):
    async with stdio_server("python") as client:
        start = time.monotonic()
        result = await call_tool(client, "run_python", {"code": "while True: pass", "timeout_s": 1})
        elapsed = time.monotonic() - start
    assert result == (True, '{"exit_code":-9,"stdout":"","stderr":"","error":"timed out after 1 s"}')
    assert elapsed < 5  # killed at the requested 1 s, not the server default of 10 s


async def test_requested_timeout_is_capped_by_the_server_limit(stdio_server, call_tool):
    env = {"SKYRL_PYTHON_TIMEOUT_S": "1"}
    result = await run_python(stdio_server, call_tool, {"code": "while True: pass", "timeout_s": 60}, env=env)
    assert result == (True, '{"exit_code":-9,"stdout":"","stderr":"","error":"timed out after 1 s"}')


async def test_non_positive_timeout_is_rejected(stdio_server, call_tool):
    result = await run_python(stdio_server, call_tool, {"code": "print(1)", "timeout_s": 0})
    assert result == (True, "Error executing tool run_python: timeout_s must be positive, got 0")


async def test_each_call_runs_in_a_fresh_temporary_directory_that_is_removed(stdio_server, call_tool):
    first = "import os\nopen('left_behind.txt', 'w').write('x')\nprint(os.getcwd())"
    second = "import os\nprint(sorted(os.listdir('.')))"
    async with stdio_server("python") as client:
        _, written = await call_tool(client, "run_python", {"code": first})
        _, listed = await call_tool(client, "run_python", {"code": second})
    workdir = written["stdout"].strip()
    assert os.path.basename(workdir).startswith("skyrl_python_")
    assert not os.path.exists(workdir)
    assert listed["stdout"] == "['.snippet.py']\n"


async def test_output_is_capped_with_a_marker(stdio_server, call_tool):
    env = {"SKYRL_PYTHON_MAX_OUTPUT_CHARS": "100"}
    _, payload = await run_python(stdio_server, call_tool, {"code": "print('x' * 100_000)"}, env=env)
    assert payload["stdout"] == "x" * 100 + "\n... [output truncated: showing the first 100 characters of 100001 bytes]"


def test_live_mode_is_refused_with_exit_status_2():
    result = start_server_process({}, "--mode", "live")
    assert result.returncode == 2
    assert "error: the python server has no live mode (it calls no outside API)" in result.stderr


def test_bad_limit_in_the_environment_names_the_variable():
    result = start_server_process({"SKYRL_PYTHON_MEMORY_MB": "lots"})
    assert result.returncode == 1
    assert "ValueError: SKYRL_PYTHON_MEMORY_MB='lots' is not a valid int" in result.stderr


def test_bad_network_flag_names_the_variable():
    result = start_server_process({"SKYRL_PYTHON_ALLOW_NETWORK": "yes"})
    assert result.returncode == 1
    assert "ValueError: SKYRL_PYTHON_ALLOW_NETWORK='yes': use 0 or 1" in result.stderr


def test_without_the_sandbox_tools_the_server_refuses_to_start(tmp_path):
    result = start_server_process({"PATH": str(tmp_path)})  # unshare, mount, sh, ... not found; pivot_root is in sbin
    assert result.returncode == 1
    assert (
        "SandboxUnavailableError: the Python sandbox needs unshare, sh, mkdir, ln, mount, umount, setpriv "
        "(util-linux, coreutils and a POSIX shell), which are not installed"
    ) in result.stderr


def test_the_unsafe_opt_out_starts_without_the_sandbox_and_warns(tmp_path):
    result = start_server_process({"PATH": str(tmp_path), "SKYRL_PYTHON_UNSAFE_NO_SANDBOX": "1"})
    assert result.returncode == 0
    assert (
        "WARNING skyrl_integrations.mcp.servers.python.server: SKYRL_PYTHON_UNSAFE_NO_SANDBOX=1: programs run "
        "without the sandbox, as this user, with read and write access to this user's files"
    ) in result.stderr
