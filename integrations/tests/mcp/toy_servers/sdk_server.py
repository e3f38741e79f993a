"""A toy MCP server on the official SDK (``mcp.server.mcpserver.MCPServer``), run as a real process by the tests.

``python sdk_server.py [--transport stdio|streamable-http] [--port N]``. Tools: ``echo``, ``add``, ``pid`` (which
process answers, to tell a reused session from a restarted one), ``sleep`` (an async wait: the server stays
responsive), ``freeze`` (blocks the server's event loop: the server is wedged until it returns), ``big`` (``n``
characters), ``fail`` (a tool error) and ``crash`` (the process exits mid-call). If the environment variable
``TOY_SERVER_DOWN_FLAG`` names a file that exists, the server exits with status 1 on start (a host gone down).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("toy-sdk")


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool(structured_output=False)
def add(a: float, b: float) -> str:
    """Add two numbers."""
    return str(a + b)


@server.tool(structured_output=False)
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool(structured_output=False)
async def sleep(seconds: float) -> str:
    """Wait without blocking the server."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(structured_output=False)
async def freeze(seconds: float) -> str:
    """Block the server's event loop (nothing else is answered meanwhile)."""
    time.sleep(seconds)
    return f"froze {seconds}"


@server.tool(structured_output=False)
def big(n: int) -> str:
    """Return n characters."""
    return "x" * n


@server.tool(structured_output=False)
def fail(message: str) -> str:
    """Always fails with a tool error carrying the message."""
    raise ToolError(message)


@server.tool(structured_output=False)
def crash() -> str:
    """Kill the server process mid-call."""
    os._exit(1)


if __name__ == "__main__":
    down_flag = os.environ.get("TOY_SERVER_DOWN_FLAG")
    if down_flag and os.path.exists(down_flag):
        raise SystemExit(f"toy server: {down_flag} exists, refusing to start")
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=("stdio", "streamable-http"), default="stdio")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
