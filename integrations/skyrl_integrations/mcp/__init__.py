"""MCP tool use: `MCPToolGroup` (client over the official MCP SDK), `MCPToolEnv` (env id ``mcp_tool``) and the
bundled offline servers (`skyrl_integrations.mcp.servers`).

Names are imported lazily, so running a bundled server (``python -m skyrl_integrations.mcp.servers.<name>``) does
not import the env and client machinery.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "MCPServerSpec": "skyrl_integrations.mcp.spec",
    "MCPToolGroup": "skyrl_integrations.mcp.client",
    "MCPServerError": "skyrl_integrations.mcp.client",
    "ToolResult": "skyrl_integrations.mcp.client",
    "close_all_sessions": "skyrl_integrations.mcp.client",
    "MCPToolEnv": "skyrl_integrations.mcp.env",
    "GroundTruth": "skyrl_integrations.mcp.scoring",
    "score_episode": "skyrl_integrations.mcp.scoring",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
