"""Bundled MCP servers: real processes (``python -m <module>``) with deterministic offline data.

``BUNDLED_SERVERS`` maps a server name to the module that runs it; ``MCPServerSpec.bundled(name)`` turns a name into
``[sys.executable, "-m", module]``. Every server takes the flags documented in :mod:`._common` (``--transport``,
``--host``, ``--port``, ``--mode``).
"""

BUNDLED_SERVERS: dict[str, str] = {
    "market": "skyrl_integrations.mcp.servers.market",
    "search": "skyrl_integrations.mcp.servers.search",
    "python": "skyrl_integrations.mcp.servers.python",
    "slack": "skyrl_integrations.mcp.servers.slack",
}

__all__ = ["BUNDLED_SERVERS"]
