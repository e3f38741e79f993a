"""The market server in offline mode: exact deterministic values, clear tool errors, both transports."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest
from mcp.client.client import Client

from skyrl_integrations.mcp.servers import BUNDLED_SERVERS
from skyrl_integrations.mcp.servers.market.data import MarketData, trading_days
from skyrl_integrations.mcp.servers.market.offline import OfflineMarket
from skyrl_integrations.mcp.servers.market.server import create_server

MARKET_TOOLS = [
    "get_stock_price",
    "get_price_history",
    "get_crypto_price",
    "get_company_profile",
    "get_financials",
    "search_tickers",
]
AAPL_2024_03_15 = {
    "ticker": "AAPL",
    "date": "2024-03-15",
    "open": 172.08,
    "high": 177.78,
    "low": 171.84,
    "close": 176.78,
    "volume": 12340109,
}


@pytest.fixture
def market():
    return Client(create_server(OfflineMarket()))


def test_bundled_servers_name_all_four_servers():
    assert BUNDLED_SERVERS == {
        "market": "skyrl_integrations.mcp.servers.market",
        "search": "skyrl_integrations.mcp.servers.search",
        "python": "skyrl_integrations.mcp.servers.python",
        "slack": "skyrl_integrations.mcp.servers.slack",
    }


def test_2024_has_252_nyse_trading_days():
    days = trading_days()
    assert (len(days), str(days[0]), str(days[-1])) == (252, "2024-01-02", "2024-12-31")


def test_data_is_identical_when_generated_again():
    first, second = MarketData(), MarketData()
    assert first.stocks == second.stocks and first.crypto == second.crypto and first.financials == second.financials


async def test_stdio_process_lists_the_six_tools_and_answers_exactly(stdio_server, call_tool):
    async with stdio_server("market") as client:
        tools = await client.list_tools()
        answer = await call_tool(client, "get_stock_price", {"ticker": "AAPL", "date": "2024-03-15"})
    assert [t.name for t in tools.tools] == MARKET_TOOLS
    assert answer == (False, AAPL_2024_03_15)


async def test_stock_price_accepts_a_lowercase_ticker(market, call_tool):
    async with market as client:
        assert await call_tool(client, "get_stock_price", {"ticker": "aapl", "date": "2024-03-15"}) == (
            False,
            AAPL_2024_03_15,
        )


async def test_weekend_date_is_an_error_naming_the_tool_that_lists_trading_days(market, call_tool):
    async with market as client:
        is_error, text = await call_tool(client, "get_stock_price", {"ticker": "AAPL", "date": "2024-03-16"})
    assert (is_error, text) == (
        True,
        "Error executing tool get_stock_price: No trading on 2024-03-16 (a Saturday): get_price_history lists the "
        "trading days of a date range",
    )


async def test_holiday_is_an_error_naming_the_holiday_and_no_other_day(market, call_tool):
    async with market as client:
        is_error, text = await call_tool(client, "get_stock_price", {"ticker": "NVDA", "date": "2024-07-04"})
    assert is_error and "No trading on 2024-07-04 (Independence Day, a market holiday): get_price_history" in text
    assert "2024-07-03" not in text and "2024-07-05" not in text


async def test_unknown_ticker_error_names_the_search_tool_and_no_ticker(market, call_tool):
    async with market as client:
        is_error, text = await call_tool(client, "get_stock_price", {"ticker": "ZZZZ", "date": "2024-03-15"})
    assert (is_error, text) == (
        True,
        "Error executing tool get_stock_price: Unknown ticker: search_tickers finds tickers by company name",
    )


async def test_date_outside_2024_is_an_error_naming_the_covered_range(market, call_tool):
    async with market as client:
        is_error, text = await call_tool(client, "get_stock_price", {"ticker": "AAPL", "date": "2025-01-02"})
    assert (is_error, text.endswith("No data for 2025-01-02: prices cover 2024-01-01 to 2024-12-31")) == (True, True)


async def test_badly_formatted_date_is_an_error_showing_the_format(market, call_tool):
    async with market as client:
        is_error, text = await call_tool(client, "get_stock_price", {"ticker": "AAPL", "date": "03/15/2024"})
    assert is_error and "Invalid date '03/15/2024': use YYYY-MM-DD" in text


@pytest.mark.parametrize("period", ["2024-Q2", "FY2023"])
async def test_a_period_passed_as_a_date_is_an_error_naming_the_financials_tool(market, call_tool, period):
    async with market as client:
        is_error, text = await call_tool(client, "get_stock_price", {"ticker": "AAPL", "date": period})
    assert is_error and text.endswith(
        f"Invalid date '{period}': that is a period, not a day; get_financials takes periods"
    )


async def test_price_history_lists_closes_of_trading_days_only(market, call_tool):
    async with market as client:
        answer = await call_tool(
            client, "get_price_history", {"ticker": "MSFT", "start_date": "2024-03-26", "end_date": "2024-04-02"}
        )
    assert answer == (
        False,
        {
            "ticker": "MSFT",
            "count": 5,
            "results": [
                {"date": "2024-03-26", "close": 333.33},
                {"date": "2024-03-27", "close": 333.91},
                {"date": "2024-03-28", "close": 331.0},
                {"date": "2024-04-01", "close": 331.45},
                {"date": "2024-04-02", "close": 335.74},
            ],
        },
    )


async def test_price_history_longer_than_a_month_is_refused(market, call_tool):
    async with market as client:
        is_error, text = await call_tool(
            client, "get_price_history", {"ticker": "MSFT", "start_date": "2024-01-02", "end_date": "2024-06-28"}
        )
    assert is_error and "ask for at most 31" in text


async def test_crypto_price_trades_on_weekends_and_accepts_short_symbols(market, call_tool):
    async with market as client:
        answer = await call_tool(client, "get_crypto_price", {"symbol": "btc", "date": "2024-03-16"})
    assert answer == (
        False,
        {
            "symbol": "BTCUSD",
            "date": "2024-03-16",
            "open": 41863.48,
            "high": 42421.0,
            "low": 40930.29,
            "close": 41769.63,
            "volume": 34486.61,
        },
    )


async def test_cheap_crypto_keeps_four_decimals(market, call_tool):
    async with market as client:
        _, answer = await call_tool(client, "get_crypto_price", {"symbol": "X:DOGEUSD", "date": "2024-12-25"})
    assert answer["close"] == 0.0472


async def test_stock_ticker_passed_to_crypto_tool_points_to_the_stock_tool(market, call_tool):
    async with market as client:
        is_error, text = await call_tool(client, "get_crypto_price", {"symbol": "AAPL", "date": "2024-03-15"})
    assert is_error and text.endswith("Not a crypto symbol but a stock ticker: get_stock_price gives stock prices")


@pytest.mark.parametrize("coin", ["eth", "Ethereum", "X:ETHUSD"])
async def test_a_coin_passed_to_the_stock_tool_gets_the_crypto_tools_and_no_symbol(market, call_tool, coin):
    async with market as client:
        is_error, text = await call_tool(client, "get_stock_price", {"ticker": coin, "date": "2024-03-15"})
    assert (is_error, text) == (
        True,
        "Error executing tool get_stock_price: Not a stock ticker but a crypto coin: get_crypto_price gives crypto "
        "prices, and search_tickers finds crypto symbols by coin name",
    )


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("get_stock_price", {"ticker": "Microsoft", "date": "2024-03-15"}),
        ("get_financials", {"ticker": "Helix Robotics Inc.", "period": "FY2024"}),
        ("get_company_profile", {"ticker": "ExxonMobil"}),
    ],
)
async def test_a_company_name_passed_as_a_ticker_gets_the_search_tool_and_no_ticker(market, call_tool, tool, arguments):
    async with market as client:
        is_error, text = await call_tool(client, tool, arguments)
    assert (is_error, text) == (
        True,
        f"Error executing tool {tool}: Unknown ticker: search_tickers finds tickers by company name",
    )


async def test_a_coin_name_passed_as_a_symbol_gets_the_search_tool_and_no_symbol(market, call_tool):
    async with market as client:
        is_error, text = await call_tool(client, "get_crypto_price", {"symbol": "ethereum", "date": "2024-03-15"})
    assert (is_error, text) == (
        True,
        "Error executing tool get_crypto_price: Unknown crypto symbol: search_tickers finds crypto symbols by coin name",
    )


async def test_company_profile(market, call_tool):
    async with market as client:
        answer = await call_tool(client, "get_company_profile", {"ticker": "HLXR"})
    assert answer == (
        False,
        {
            "ticker": "HLXR",
            "name": "Helix Robotics Inc.",
            "exchange": "NASDAQ",
            "sector": "Industrials",
            "industry": "Specialty Industrial Machinery",
            "employees": 4200,
        },
    )


@pytest.mark.parametrize("period", ["2024-Q2", "2024Q2", "Q2 2024", "q2-2024"])
async def test_quarterly_financials_accept_common_period_spellings(market, call_tool, period):
    async with market as client:
        answer = await call_tool(client, "get_financials", {"ticker": "AAPL", "period": period})
    assert answer == (
        False,
        {
            "ticker": "AAPL",
            "period": "2024-Q2",
            "revenue_usd_millions": 123176.4,
            "net_income_usd_millions": 35262.4,
            "eps": 2.27,
        },
    )


async def test_fiscal_year_financials_sum_the_quarters(market, call_tool):
    async with market as client:
        answer = await call_tool(client, "get_financials", {"ticker": "QBTL", "period": "FY2024"})
    assert answer == (
        False,
        {
            "ticker": "QBTL",
            "period": "FY2024",
            "revenue_usd_millions": 412.8,
            "net_income_usd_millions": -84.7,
            "eps": -0.7,
        },
    )


async def test_search_tickers_matches_company_names(market, call_tool):
    async with market as client:
        answer = await call_tool(client, "search_tickers", {"query": "robotics"})
    assert answer == (
        False,
        {"query": "robotics", "results": [{"ticker": "HLXR", "name": "Helix Robotics Inc.", "type": "stock"}]},
    )


async def test_missing_argument_is_an_error_naming_it(market, call_tool):
    async with market as client:
        is_error, text = await call_tool(client, "get_stock_price", {"ticker": "AAPL"})
    assert is_error and "date" in text and "Field required" in text


async def test_streamable_http_transport_serves_the_same_data(call_tool, free_port):
    port = free_port
    module = BUNDLED_SERVERS["market"]
    cmd = [sys.executable, "-m", module, "--transport", "streamable-http", "--port", str(port)]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stderr.read().decode()
                assert time.monotonic() < deadline, "streamable-http server did not come up within 30 s"
                time.sleep(0.1)
        async with Client(url) as client:
            answer = await call_tool(client, "get_stock_price", {"ticker": "AAPL", "date": "2024-03-15"})
        assert answer == (False, AAPL_2024_03_15)
    finally:
        process.terminate()
        process.wait(timeout=10)
