"""Live backend of the market server: Polygon (prices, ticker search, reference data) and FMP (profiles, income
statements), mapped to the same small dicts as the offline backend.

Keys: ``POLYGON_API_KEY`` (sent as the ``apiKey`` query parameter) and ``FMP_API_KEY`` (``apikey`` query parameter),
from the environment or ``.env``; at least one is required. Base URLs: ``POLYGON_BASE_URL`` / ``FMP_BASE_URL``
(defaults: the public APIs). A tool whose API has no key answers with a tool error naming the missing variable.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from .._common import LiveAPI, LiveModeError, ToolError, api_key
from .offline import (
    MAX_SEARCH_RESULTS,
    history_result,
    normalize_crypto_symbol,
    normalize_period,
    normalize_ticker,
    parse_date,
    parse_date_range,
)

POLYGON_DEFAULT_URL = "https://api.polygon.io"
FMP_DEFAULT_URL = "https://financialmodelingprep.com"

# Polygon reports exchanges as ISO 10383 MIC codes.
_MIC_NAMES = {"XNAS": "NASDAQ", "XNYS": "NYSE", "ARCX": "NYSE ARCA", "XASE": "NYSE AMERICAN", "BATS": "CBOE BZX"}


class LiveMarket:
    def __init__(
        self,
        *,
        polygon_key: str | None,
        fmp_key: str | None,
        polygon_base_url: str = POLYGON_DEFAULT_URL,
        fmp_base_url: str = FMP_DEFAULT_URL,
        timeout_s: float = 20.0,
    ) -> None:
        if not polygon_key and not fmp_key:
            raise LiveModeError(
                "the market server's live mode needs POLYGON_API_KEY and/or FMP_API_KEY: set them in the environment "
                "or in a .env file (./.env or the file named by SKYRL_DOTENV), or run with --mode offline"
            )
        secrets = [k for k in (polygon_key, fmp_key) if k]
        self._polygon_key = polygon_key
        self._fmp_key = fmp_key
        self._polygon = LiveAPI("Polygon", polygon_base_url, secrets=secrets, timeout_s=timeout_s)
        self._fmp = LiveAPI("FMP", fmp_base_url, secrets=secrets, timeout_s=timeout_s)

    @classmethod
    def from_env(cls) -> LiveMarket:
        return cls(
            polygon_key=api_key("POLYGON_API_KEY"),
            fmp_key=api_key("FMP_API_KEY"),
            polygon_base_url=os.environ.get("POLYGON_BASE_URL", POLYGON_DEFAULT_URL),
            fmp_base_url=os.environ.get("FMP_BASE_URL", FMP_DEFAULT_URL),
        )

    # -- transport -------------------------------------------------------------------------------------------------

    def _polygon_get(self, path: str, params: dict[str, Any] | None = None) -> dict:
        if not self._polygon_key:
            raise ToolError("this tool needs Polygon in live mode: set POLYGON_API_KEY")
        payload = self._polygon.request("GET", path, params={**(params or {}), "apiKey": self._polygon_key})
        if not isinstance(payload, dict):
            raise ToolError("Polygon API error: unexpected response (expected a JSON object)")
        if payload.get("status") == "ERROR":
            message = payload.get("error") or payload.get("message") or "no message"
            raise ToolError(f"Polygon API error: {self._polygon.redact(str(message))}")
        return payload

    def _fmp_get(self, path: str, params: dict[str, Any] | None = None) -> list:
        if not self._fmp_key:
            raise ToolError("this tool needs FMP in live mode: set FMP_API_KEY")
        payload = self._fmp.request("GET", path, params={**(params or {}), "apikey": self._fmp_key})
        if isinstance(payload, dict) and "Error Message" in payload:
            raise ToolError(f"FMP API error: {self._fmp.redact(str(payload['Error Message']))}")
        if not isinstance(payload, list):
            raise ToolError("FMP API error: unexpected response (expected a JSON list)")
        return payload

    def _aggs(self, polygon_ticker: str, start: dt.date, end: dt.date) -> list[dict]:
        path = f"/v2/aggs/ticker/{polygon_ticker}/range/1/day/{start}/{end}"
        payload = self._polygon_get(path, {"adjusted": "true", "sort": "asc", "limit": 5000})
        return payload.get("results") or []

    @staticmethod
    def _bar(agg: dict) -> dict:
        day = dt.datetime.fromtimestamp(agg["t"] / 1000, tz=dt.UTC).date()
        return {
            "date": day.isoformat(),
            "open": agg["o"],
            "high": agg["h"],
            "low": agg["l"],
            "close": agg["c"],
            "volume": agg["v"],
        }

    # -- tools -----------------------------------------------------------------------------------------------------

    def stock_price(self, ticker: str, date: str) -> dict:
        symbol, day = normalize_ticker(ticker), parse_date(date)
        aggs = self._aggs(symbol, day, day)
        if not aggs:
            raise ToolError(
                f"No trading data for {symbol} on {day} (weekend, market holiday, or unknown ticker): "
                "get_price_history lists the trading days of a date range, search_tickers finds tickers by company name"
            )
        return {"ticker": symbol, **self._bar(aggs[0]), "date": day.isoformat()}

    def price_history(self, ticker: str, start_date: str, end_date: str) -> dict:
        symbol = normalize_ticker(ticker)
        start, end = parse_date_range(start_date, end_date)
        rows = [{"date": bar["date"], "close": bar["close"]} for bar in map(self._bar, self._aggs(symbol, start, end))]
        return history_result(symbol, start, end, rows)

    def crypto_price(self, symbol: str, date: str) -> dict:
        pair, day = normalize_crypto_symbol(symbol), parse_date(date)
        aggs = self._aggs(f"X:{pair}", day, day)
        if not aggs:
            raise ToolError(f"No data for crypto pair {pair} on {day}")
        return {"symbol": pair, **self._bar(aggs[0]), "date": day.isoformat()}

    def company_profile(self, ticker: str) -> dict:
        symbol = normalize_ticker(ticker)
        if self._fmp_key:
            rows = self._fmp_get(f"/api/v3/profile/{symbol}")
            if not rows:
                raise ToolError(f"Unknown ticker {symbol!r}: FMP has no profile for it")
            row = rows[0]
            employees = row.get("fullTimeEmployees")
            return {
                "ticker": row.get("symbol", symbol),
                "name": row.get("companyName"),
                "exchange": row.get("exchangeShortName") or row.get("exchange"),
                "sector": row.get("sector"),
                "industry": row.get("industry"),
                "employees": int(employees) if employees not in (None, "") else None,
            }
        result = self._polygon_get(f"/v3/reference/tickers/{symbol}").get("results") or {}
        industry = result.get("sic_description")
        return {
            "ticker": result.get("ticker", symbol),
            "name": result.get("name"),
            "exchange": _MIC_NAMES.get(result.get("primary_exchange"), result.get("primary_exchange")),
            "sector": None,
            "industry": industry.title() if industry else None,
            "employees": result.get("total_employees"),
        }

    def financials(self, ticker: str, period: str) -> dict:
        symbol, key = normalize_ticker(ticker), normalize_period(period)
        if key.startswith("FY"):
            year, fmp_period, fmp_query = key[2:], "FY", "annual"
        else:
            year, fmp_period, fmp_query = key[:4], key[5:], "quarter"
        rows = self._fmp_get(f"/api/v3/income-statement/{symbol}", {"period": fmp_query, "limit": 12})
        for row in rows:
            if str(row.get("calendarYear")) == year and row.get("period") == fmp_period:
                return {
                    "ticker": symbol,
                    "period": key,
                    "revenue_usd_millions": round(row["revenue"] / 1e6, 1),
                    "net_income_usd_millions": round(row["netIncome"] / 1e6, 1),
                    "eps": row.get("eps"),
                }
        available = ", ".join(f"{r.get('calendarYear')}-{r.get('period')}" for r in rows[:8]) or "none"
        raise ToolError(f"No {key} income statement for {symbol} (fiscal periods available: {available})")

    def search_tickers(self, query: str) -> dict:
        if not str(query).strip():
            raise ToolError("query is empty: pass part of a company name or ticker, e.g. 'robotics'")
        if self._polygon_key:
            params = {"search": query, "active": "true", "limit": MAX_SEARCH_RESULTS}
            rows = self._polygon_get("/v3/reference/tickers", params).get("results") or []
            results = [
                {"ticker": str(r.get("ticker", "")).removeprefix("X:"), "name": r.get("name"), "type": _kind(r)}
                for r in rows
            ]
        else:
            rows = self._fmp_get("/api/v3/search", {"query": query, "limit": MAX_SEARCH_RESULTS})
            results = [{"ticker": r.get("symbol"), "name": r.get("name"), "type": "stock"} for r in rows]
        return {"query": query, "results": results[:MAX_SEARCH_RESULTS]}


def _kind(polygon_ticker: dict) -> str:
    return "crypto" if polygon_ticker.get("market") == "crypto" else "stock"
