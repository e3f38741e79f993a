"""Real MCP servers for the client and env tests: the toy servers in `toy_servers/` run as processes, over stdio
or over streamable HTTP on a free localhost port. Each test module starts from an empty session pool and stops its servers at the end.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from skyrl_integrations.mcp.client import close_all_sessions
from skyrl_integrations.mcp.spec import MCPServerSpec

TOY_SERVERS = {
    "mcp-sdk": Path(__file__).parent / "toy_servers" / "sdk_server.py",
    "fastmcp": Path(__file__).parent / "toy_servers" / "fastmcp_server.py",
}
"""The same toy tools on two server implementations: the official SDK's `MCPServer` and standalone fastmcp."""


@pytest.fixture
def toy_spec():
    """Factory: `toy_spec(kind="mcp-sdk", name="toy")`, the stdio spec of a toy server (`TOY_SERVERS` kind)."""

    def make(kind: str = "mcp-sdk", name: str = "toy") -> MCPServerSpec:
        return MCPServerSpec(name, command=[sys.executable, str(TOY_SERVERS[kind])])

    return make


@pytest.fixture(autouse=True, scope="module")
def fresh_sessions():
    """No session leaks from one test module into the next."""
    close_all_sessions()
    yield
    close_all_sessions()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HTTPServer:
    """A toy server process serving streamable HTTP at `url`; `start()` / `stop()` may be called again."""

    def __init__(self, script: Path):
        self.script = script
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> HTTPServer:
        self.process = subprocess.Popen(
            [sys.executable, str(self.script), "--transport", "streamable-http", "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "FASTMCP_SHOW_SERVER_BANNER": "false"},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.script.name} exited with {self.process.returncode}")
            try:
                httpx.get(self.url, timeout=0.5)
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise TimeoutError(f"{self.script.name} did not listen on {self.url} within {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def http_server():
    """Factory: `http_server(kind="mcp-sdk")` starts a toy server over streamable HTTP; stopped at teardown."""
    servers: list[HTTPServer] = []

    def start(kind: str = "mcp-sdk") -> HTTPServer:
        servers.append(HTTPServer(TOY_SERVERS[kind]).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
