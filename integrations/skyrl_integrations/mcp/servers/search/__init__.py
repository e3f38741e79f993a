"""Web search MCP server: Tavily-shaped ``web_search`` and ``fetch_page``.

Offline mode searches the shipped corpus of :mod:`.corpus` with SQLite FTS5; live mode (:mod:`.live`) calls Tavily.
Run it with ``python -m skyrl_integrations.mcp.servers.search``.
"""
