"""The search MCP server: Tavily-style ``web_search`` and ``fetch_page`` over a backend (offline corpus or Tavily)."""

from __future__ import annotations

from typing import Annotated, Protocol

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from .._common import Mode, to_json
from .offline import MAX_RESULTS


class SearchBackend(Protocol):
    def search(self, query: str, max_results: int = 3) -> dict: ...
    def fetch(self, url: str) -> dict: ...


def build_server(mode: Mode) -> MCPServer:
    """The search server for ``mode``; live mode raises ``LiveModeError`` when ``TAVILY_API_KEY`` is not set."""
    if mode == "live":
        from .live import LiveSearch

        backend: SearchBackend = LiveSearch.from_env()
    else:
        from .offline import OfflineSearch

        backend = OfflineSearch()
    return create_server(backend)


def create_server(backend: SearchBackend) -> MCPServer:
    server = MCPServer("search", instructions="Web search: find pages, then open one for its full text.")

    @server.tool(structured_output=False)
    def web_search(
        query: Annotated[str, Field(description="what to look for, e.g. 'Helix Robotics headquarters'")],
        max_results: Annotated[int, Field(description=f"number of results, 1 to {MAX_RESULTS}")] = 3,
    ) -> str:
        """Search the web; returns titles, URLs, short content snippets and relevance scores."""
        return to_json(backend.search(query, max_results))

    @server.tool(structured_output=False)
    def fetch_page(url: Annotated[str, Field(description="a URL returned by web_search")]) -> str:
        """The full text of a web page."""
        return to_json(backend.fetch(url))

    return server
