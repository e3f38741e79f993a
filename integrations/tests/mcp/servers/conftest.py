"""Fixtures for the bundled-server tests: MCP clients (in-process, stdio process, streamable HTTP) and local HTTP
servers that speak the live APIs' wire formats."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import uvicorn
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters


def _tool_text(result) -> str:
    return "".join(block.text for block in result.content if getattr(block, "type", None) == "text")


@pytest.fixture
def call_tool():
    """``await call_tool(client, name, args)`` -> ``(is_error, payload)``: the JSON of a success, the text of an error."""

    async def call(client: Client, name: str, arguments: dict) -> tuple[bool, object]:
        result = await client.call_tool(name, arguments)
        text = _tool_text(result)
        return (True, text) if result.is_error else (False, json.loads(text))

    return call


@pytest.fixture
def stdio_server():
    """``stdio_server(name, *args, env=None, cwd=None)`` -> a ``Client`` that launches the bundled server process."""

    def make(name: str, *args: str, env: dict[str, str] | None = None, cwd: str | None = None) -> Client:
        module = f"skyrl_integrations.mcp.servers.{name}"
        params = StdioServerParameters(command=sys.executable, args=["-m", module, *args], env=env, cwd=cwd)
        return Client(params, read_timeout_seconds=30)

    return make


@pytest.fixture
def free_port() -> int:
    """A localhost TCP port that was free a moment ago (for servers that bind it themselves)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def _serve_asgi(app) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("local wire-format server did not start within 10 s")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def serve_asgi() -> Callable:
    """``with serve_asgi(app) as base_url:`` runs an ASGI app (a fake of a live API) on a free localhost port."""
    return _serve_asgi
