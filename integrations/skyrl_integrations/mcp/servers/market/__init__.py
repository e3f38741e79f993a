"""Market data MCP server (stock/crypto prices, company profiles, financials; Polygon/FMP-style tool surface).

Offline mode serves the deterministic data of :mod:`.data`; live mode (:mod:`.live`) calls Polygon and FMP.
Run it with ``python -m skyrl_integrations.mcp.servers.market``.
"""
