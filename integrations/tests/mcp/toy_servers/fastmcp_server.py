"""The same toy tools on the standalone ``fastmcp`` package (a second, independent server implementation).

``python fastmcp_server.py [--transport stdio|streamable-http] [--port N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError

server = FastMCP("toy-fastmcp")


@server.tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool
def add(a: float, b: float) -> str:
    """Add two numbers."""
    return str(a + b)


@server.tool
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool
async def sleep(seconds: float) -> str:
    """Wait without blocking the server."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool
async def freeze(seconds: float) -> str:
    """Block the server's event loop (nothing else is answered meanwhile)."""
    time.sleep(seconds)
    return f"froze {seconds}"


@server.tool
def big(n: int) -> str:
    """Return n characters."""
    return "x" * n


@server.tool
def fail(message: str) -> str:
    """Always fails with a tool error carrying the message."""
    raise ToolError(message)


@server.tool
def crash() -> str:
    """Kill the server process mid-call."""
    os._exit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=("stdio", "streamable-http"), default="stdio")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    if args.transport == "stdio":
        server.run("stdio", show_banner=False)
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port, show_banner=False)
