"""The market MCP server: Polygon/FMP-style tools over a backend (offline data or the live APIs)."""

from __future__ import annotations

from typing import Annotated, Protocol

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from .._common import Mode, to_json

Ticker = Annotated[str, Field(description="stock ticker, e.g. AAPL")]
Date = Annotated[str, Field(description="date as YYYY-MM-DD")]


class MarketBackend(Protocol):
    def stock_price(self, ticker: str, date: str) -> dict: ...
    def price_history(self, ticker: str, start_date: str, end_date: str) -> dict: ...
    def crypto_price(self, symbol: str, date: str) -> dict: ...
    def company_profile(self, ticker: str) -> dict: ...
    def financials(self, ticker: str, period: str) -> dict: ...
    def search_tickers(self, query: str) -> dict: ...


def build_server(mode: Mode) -> MCPServer:
    """The market server for ``mode``; live mode raises ``LiveModeError`` when no Polygon/FMP key is configured."""
    if mode == "live":
        from .live import LiveMarket

        backend: MarketBackend = LiveMarket.from_env()
    else:
        from .offline import OfflineMarket

        backend = OfflineMarket()
    return create_server(backend)


def create_server(backend: MarketBackend) -> MCPServer:
    server = MCPServer("market", instructions="Stock and crypto prices, company profiles and financials.")

    @server.tool(structured_output=False)
    def get_stock_price(ticker: Ticker, date: Date) -> str:
        """Daily open/high/low/close/volume of a stock on one trading day."""
        return to_json(backend.stock_price(ticker, date))

    @server.tool(structured_output=False)
    def get_price_history(
        ticker: Ticker,
        start_date: Annotated[str, Field(description="first day, YYYY-MM-DD")],
        end_date: Annotated[str, Field(description="last day, YYYY-MM-DD")],
    ) -> str:
        """Daily closing prices of a stock between two dates (inclusive, at most about one month)."""
        return to_json(backend.price_history(ticker, start_date, end_date))

    @server.tool(structured_output=False)
    def get_crypto_price(
        symbol: Annotated[str, Field(description="crypto pair, e.g. BTCUSD or BTC")], date: Date
    ) -> str:
        """Daily open/high/low/close/volume of a crypto pair (in USD) on one day."""
        return to_json(backend.crypto_price(symbol, date))

    @server.tool(structured_output=False)
    def get_company_profile(ticker: Ticker) -> str:
        """Company name, exchange, sector, industry and number of employees."""
        return to_json(backend.company_profile(ticker))

    @server.tool(structured_output=False)
    def get_financials(
        ticker: Ticker, period: Annotated[str, Field(description="quarter like 2024-Q1 or fiscal year like FY2024")]
    ) -> str:
        """Revenue and net income (USD millions) and EPS (USD) for one quarter or fiscal year."""
        return to_json(backend.financials(ticker, period))

    @server.tool(structured_output=False)
    def search_tickers(query: Annotated[str, Field(description="part of a company name or ticker")]) -> str:
        """Find tickers whose symbol or company name contains all words of the query."""
        return to_json(backend.search_tickers(query))

    return server
