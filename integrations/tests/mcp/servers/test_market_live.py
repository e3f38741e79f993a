"""The market server's live mode against local servers speaking Polygon's and FMP's wire formats."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from skyrl_integrations.mcp.servers._common import LiveModeError, ToolError
from skyrl_integrations.mcp.servers.market.live import LiveMarket

POLYGON_KEY = "pk_test_0123456789abcdef"  # pragma: allowlist secret
FMP_KEY = "fmp_test_fedcba9876543210"  # pragma: allowlist secret

# Polygon day bars are stamped at midnight US/Eastern: 2024-03-15 00:00 EDT = 1710475200000 ms.
AAPL_BAR = {"v": 73488997.0, "vw": 172.8416, "o": 171.17, "c": 172.62, "h": 172.62, "l": 170.285, "t": 1710475200000, "n": 622375}  # fmt: skip
BTC_BAR = {"v": 31337.5, "vw": 68010.2, "o": 69450.0, "c": 65300.1, "h": 70010.0, "l": 64700.0, "t": 1710547200000, "n": 99122}  # fmt: skip
AAPL_PROFILE = {
    "symbol": "AAPL",
    "price": 172.62,
    "companyName": "Apple Inc.",
    "currency": "USD",
    "exchange": "NASDAQ Global Select",
    "exchangeShortName": "NASDAQ",
    "industry": "Consumer Electronics",
    "sector": "Technology",
    "country": "US",
    "fullTimeEmployees": "161000",
}
AAPL_QUARTERS = [
    {"date": "2024-06-29", "symbol": "AAPL", "reportedCurrency": "USD", "calendarYear": "2024", "period": "Q3",
     "revenue": 85777000000, "netIncome": 21448000000, "eps": 1.4, "epsdiluted": 1.4},
    {"date": "2024-03-30", "symbol": "AAPL", "reportedCurrency": "USD", "calendarYear": "2024", "period": "Q2",
     "revenue": 90753000000, "netIncome": 23636000000, "eps": 1.53, "epsdiluted": 1.53},
]  # fmt: skip


def _polygon_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"status": "ERROR", "request_id": "a1b2c3", "error": message}, status_code=status)


def wire_app(requests: list[dict]) -> FastAPI:
    """Polygon (``/v2``, ``/v3``) and FMP (``/api/v3``) endpoints; ``requests`` records path + query of each call."""
    app = FastAPI()

    @app.middleware("http")
    async def record(request: Request, call_next):
        requests.append({"path": request.url.path, "query": dict(request.query_params)})
        return await call_next(request)

    @app.get("/v2/aggs/ticker/{ticker}/range/1/day/{start}/{end}")
    def aggs(ticker: str, start: str, end: str, apiKey: str = ""):  # noqa: N803 - Polygon's parameter name
        if apiKey != POLYGON_KEY:
            return _polygon_error(401, "Unknown API Key")
        if ticker == "RATE":
            return _polygon_error(429, "You've exceeded the maximum requests per minute, please wait or upgrade.")
        if ticker == "BOOM":
            return PlainTextResponse("upstream connect error", status_code=503)
        bars = {"AAPL": [AAPL_BAR], "X:BTCUSD": [BTC_BAR]}.get(ticker, [])
        body = {"ticker": ticker, "queryCount": len(bars), "resultsCount": len(bars), "adjusted": True,
                "status": "OK", "request_id": "6a7e4", "count": len(bars)}  # fmt: skip
        return {**body, "results": bars} if bars else body

    @app.get("/api/v3/profile/{ticker}")
    def profile(ticker: str, apikey: str = ""):
        if apikey != FMP_KEY:
            return JSONResponse({"Error Message": "Invalid API KEY. Please retry or visit our documentation."}, 401)
        return [AAPL_PROFILE] if ticker == "AAPL" else []

    @app.get("/api/v3/income-statement/{ticker}")
    def income_statement(ticker: str, period: str = "annual", limit: int = 5, apikey: str = ""):
        if apikey != FMP_KEY:
            return JSONResponse({"Error Message": "Invalid API KEY. Please retry or visit our documentation."}, 401)
        return AAPL_QUARTERS if (ticker, period) == ("AAPL", "quarter") else []

    @app.get("/v3/reference/tickers")
    def search(search: str = "", apiKey: str = ""):  # noqa: N803
        results = [{"ticker": "X:BTCUSD", "name": "Bitcoin - United States Dollar", "market": "crypto"}]
        return {"results": results if "bitcoin" in search.lower() else [], "status": "OK", "count": 1}

    return app


@pytest.fixture
def wire(serve_asgi):
    requests: list[dict] = []
    with serve_asgi(wire_app(requests)) as base_url:
        yield base_url, requests


@pytest.fixture
def live(wire):
    base_url, _ = wire
    return LiveMarket(polygon_key=POLYGON_KEY, fmp_key=FMP_KEY, polygon_base_url=base_url, fmp_base_url=base_url)


def test_stock_price_maps_a_polygon_day_bar(live):
    assert live.stock_price("aapl", "2024-03-15") == {
        "ticker": "AAPL",
        "date": "2024-03-15",
        "open": 171.17,
        "high": 172.62,
        "low": 170.285,
        "close": 172.62,
        "volume": 73488997.0,
    }


def test_polygon_key_is_sent_as_the_apikey_query_parameter(live, wire):
    live.stock_price("AAPL", "2024-03-15")
    _, requests = wire
    assert requests[-1] == {
        "path": "/v2/aggs/ticker/AAPL/range/1/day/2024-03-15/2024-03-15",
        "query": {"adjusted": "true", "sort": "asc", "limit": "5000", "apiKey": POLYGON_KEY},
    }


def test_day_without_bars_is_a_tool_error_naming_the_tools_that_find_days_and_tickers(live):
    with pytest.raises(ToolError, match=r"on 2024-03-16 \(weekend, .*\): get_price_history .*, search_tickers finds"):
        live.stock_price("MSFT", "2024-03-16")


def test_crypto_price_queries_the_x_prefixed_pair(live):
    assert live.crypto_price("BTC-USD", "2024-03-16") == {
        "symbol": "BTCUSD",
        "date": "2024-03-16",
        "open": 69450.0,
        "high": 70010.0,
        "low": 64700.0,
        "close": 65300.1,
        "volume": 31337.5,
    }


def test_http_429_is_a_rate_limit_tool_error_without_the_key(live):
    with pytest.raises(ToolError) as caught:
        live.stock_price("RATE", "2024-03-15")
    message = str(caught.value)
    assert message.startswith("Polygon API error (HTTP 429): rate limit exceeded; wait and retry")
    assert POLYGON_KEY not in message


def test_http_503_is_a_server_error_tool_error(live):
    with pytest.raises(ToolError, match=r"Polygon API error \(HTTP 503\): server error; try again later"):
        live.stock_price("BOOM", "2024-03-15")


def test_rejected_key_is_a_tool_error_saying_so(wire):
    base_url, _ = wire
    wrong = LiveMarket(polygon_key="wrong-key", fmp_key=None, polygon_base_url=base_url)  # pragma: allowlist secret
    with pytest.raises(ToolError, match=r"HTTP 401\): the API key was rejected; check it"):
        wrong.stock_price("AAPL", "2024-03-15")


def test_company_profile_maps_fmp_profile_and_sends_apikey(live, wire):
    assert live.company_profile("AAPL") == {
        "ticker": "AAPL",
        "name": "Apple Inc.",
        "exchange": "NASDAQ",
        "sector": "Technology",
        "industry": "Consumer Electronics",
        "employees": 161000,
    }
    assert wire[1][-1] == {"path": "/api/v3/profile/AAPL", "query": {"apikey": FMP_KEY}}


def test_unknown_ticker_profile_is_a_tool_error(live):
    with pytest.raises(ToolError, match="Unknown ticker 'ZZZZ': FMP has no profile for it"):
        live.company_profile("ZZZZ")


def test_financials_pick_the_fiscal_quarter_in_usd_millions(live):
    assert live.financials("AAPL", "Q2 2024") == {
        "ticker": "AAPL",
        "period": "2024-Q2",
        "revenue_usd_millions": 90753.0,
        "net_income_usd_millions": 23636.0,
        "eps": 1.53,
    }


def test_missing_quarter_lists_the_available_ones(live):
    with pytest.raises(ToolError, match=r"No 2023-Q1 income statement for AAPL \(fiscal periods available: 2024-Q3, 2024-Q2\)"):  # fmt: skip
        live.financials("AAPL", "2023-Q1")


def test_financials_without_fmp_key_name_the_missing_variable(wire):
    base_url, _ = wire
    polygon_only = LiveMarket(polygon_key=POLYGON_KEY, fmp_key=None, polygon_base_url=base_url)
    with pytest.raises(ToolError, match="this tool needs FMP in live mode: set FMP_API_KEY"):
        polygon_only.financials("AAPL", "2024-Q2")


def test_search_tickers_strips_polygons_crypto_prefix(live):
    assert live.search_tickers("bitcoin") == {
        "query": "bitcoin",
        "results": [{"ticker": "BTCUSD", "name": "Bitcoin - United States Dollar", "type": "crypto"}],
    }


def test_no_keys_at_all_is_a_live_mode_error():
    with pytest.raises(LiveModeError, match="needs POLYGON_API_KEY and/or FMP_API_KEY"):
        LiveMarket(polygon_key=None, fmp_key=None)


async def test_live_process_answers_and_never_logs_the_keys(wire, call_tool, tmp_path):
    base_url, _ = wire
    env = {"POLYGON_API_KEY": POLYGON_KEY, "FMP_API_KEY": FMP_KEY, "POLYGON_BASE_URL": base_url, "FMP_BASE_URL": base_url}  # fmt: skip
    module = "skyrl_integrations.mcp.servers.market"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", module, "--mode", "live", "--log-level", "DEBUG"], env=env, cwd=tmp_path
    )
    with open(tmp_path / "stderr.log", "w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            ok = await session.call_tool("get_stock_price", {"ticker": "AAPL", "date": "2024-03-15"})
            failed = await session.call_tool("get_stock_price", {"ticker": "RATE", "date": "2024-03-15"})
        errlog.seek(0)
        log = errlog.read()
    assert (ok.is_error, '"close":172.62' in ok.content[0].text) == (False, True)
    assert failed.is_error and "HTTP 429" in failed.content[0].text
    assert "DEBUG" in log  # the server did log at DEBUG level ...
    assert POLYGON_KEY not in log and FMP_KEY not in log  # ... and never wrote a key


def test_live_mode_without_a_key_exits_2_naming_the_variables():
    env = {k: v for k, v in os.environ.items() if k not in ("POLYGON_API_KEY", "FMP_API_KEY", "SKYRL_DOTENV")}
    with tempfile.TemporaryDirectory() as empty_dir:  # no .env there
        result = subprocess.run(
            [sys.executable, "-m", "skyrl_integrations.mcp.servers.market", "--mode", "live"],
            env=env,
            cwd=empty_dir,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert "error: the market server's live mode needs POLYGON_API_KEY and/or FMP_API_KEY" in result.stderr
