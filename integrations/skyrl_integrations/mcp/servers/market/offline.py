"""Offline backend of the market server: answers every tool from :data:`.data.MARKET`.

Both backends (this one and :mod:`.live`) return the same small dicts and raise ``ToolError`` with a message the model
can act on: the tool that finds a valid value (``search_tickers`` for a ticker or crypto symbol, ``get_price_history``
for trading days, ``get_financials`` for a period), the expected format, the covered date range. No message holds the
value to pass next (a ticker, a symbol, a date): finding it is the agent's task.
"""

from __future__ import annotations

import datetime as dt
import re

from .._common import ToolError, lookup_error
from .data import FIRST_DAY, HOLIDAYS, LAST_DAY, MARKET, Bar, MarketData

MAX_HISTORY_BARS = 31


def parse_date_range(start_date: str, end_date: str) -> tuple[dt.date, dt.date]:
    start, end = parse_date(start_date, "start_date"), parse_date(end_date, "end_date")
    if start > end:
        raise ToolError(f"start_date {start} is after end_date {end}")
    return start, end


def history_result(symbol: str, start: dt.date, end: dt.date, rows: list[dict]) -> dict:
    """`get_price_history`'s output (offline and live), refusing more than `MAX_HISTORY_BARS` rows."""
    if len(rows) > MAX_HISTORY_BARS:
        raise ToolError(
            f"{len(rows)} trading days between {start} and {end}; ask for at most {MAX_HISTORY_BARS} "
            "(about one month) per call"
        )
    return {"ticker": symbol, "count": len(rows), "results": rows}


MAX_SEARCH_RESULTS = 5

_QUARTER = re.compile(r"^(?:(\d{4})\s*-?\s*Q([1-4])|Q([1-4])\s*[- ]?\s*(\d{4}))$")
_FISCAL_YEAR = re.compile(r"^(?:FY\s*-?\s*)?(\d{4})$")
_NAMED_FISCAL_YEAR = re.compile(r"^FY\s*-?\s*\d{4}$")


def parse_date(value: str, arg: str = "date") -> dt.date:
    """An ISO date; a quarter or fiscal year where a date goes gets an error naming the tool that takes periods."""
    try:
        return dt.date.fromisoformat(str(value).strip())
    except ValueError:
        pass
    text = str(value).strip().upper()
    if _QUARTER.match(text) or _NAMED_FISCAL_YEAR.match(text):
        raise ToolError(f"Invalid {arg} {value!r}: that is a period, not a day; get_financials takes periods")
    raise ToolError(f"Invalid {arg} {value!r}: use YYYY-MM-DD, e.g. 2024-03-15")


def _has_every_word(words: list[str], text: str) -> bool:
    """Whether ``text`` contains each of ``words`` (casefolded), as `search_tickers` matches a query."""
    return all(w in text.casefold() for w in words)


def normalize_ticker(ticker: str) -> str:
    return str(ticker).strip().lstrip("$").upper()


def normalize_crypto_symbol(symbol: str) -> str:
    """``BTC``, ``btc-usd``, ``BTC/USD``, ``X:BTCUSD`` and ``BTCUSD`` all mean ``BTCUSD``."""
    text = str(symbol).strip().upper().removeprefix("X:")
    text = re.sub(r"[-/ _]", "", text)
    return text if text.endswith("USD") else text + "USD"


def normalize_period(period: str) -> str:
    """``2024-Q1``, ``2024Q1``, ``Q1 2024`` -> ``2024-Q1``; ``FY2024``, ``FY 2024``, ``2024`` -> ``FY2024``."""
    text = str(period).strip().upper()
    quarter = _QUARTER.match(text)
    if quarter:
        year = quarter.group(1) or quarter.group(4)
        number = quarter.group(2) or quarter.group(3)
        return f"{year}-Q{number}"
    fiscal_year = _FISCAL_YEAR.match(text)
    if fiscal_year:
        return f"FY{fiscal_year.group(1)}"
    raise ToolError(f"Invalid period {period!r}: use a quarter like 2024-Q1 or a fiscal year like FY2024")


class OfflineMarket:
    def __init__(self, data: MarketData = MARKET) -> None:
        self.data = data

    def _company_bars(self, ticker: str) -> tuple[str, dict[dt.date, Bar]]:
        """The company's ticker and bars; an unknown ticker raises an error that names the tool finding the right
        value (never the value itself: the agent has to make that call)."""
        symbol = normalize_ticker(ticker)
        if symbol not in self.data.stocks:
            if normalize_crypto_symbol(symbol) in self.data.crypto or self._is_coin_name(ticker):
                raise ToolError(
                    "Not a stock ticker but a crypto coin: get_crypto_price gives crypto prices, and search_tickers "
                    "finds crypto symbols by coin name"
                )
            raise lookup_error("ticker", "search_tickers", "company name")
        return symbol, self.data.stocks[symbol]

    def _is_coin_name(self, name: str) -> bool:
        """Whether ``name`` (e.g. "Ethereum") is a crypto pair's name, ignoring case and spaces."""
        wanted = "".join(str(name).split()).casefold()
        return any(p.name.casefold() == wanted for p in self.data.crypto_pairs.values())

    def _check_range(self, day: dt.date) -> None:
        if not FIRST_DAY <= day <= LAST_DAY:
            raise ToolError(f"No data for {day}: prices cover {FIRST_DAY} to {LAST_DAY}")

    @staticmethod
    def _no_trading_error(day: dt.date) -> ToolError:
        """Names the tool that lists trading days, not the nearest ones: a question about "the last trading day of a
        month" is answered by finding that day."""
        reason = f"{HOLIDAYS[day]}, a market holiday" if day in HOLIDAYS else f"a {day:%A}"
        return ToolError(f"No trading on {day} ({reason}): get_price_history lists the trading days of a date range")

    def stock_price(self, ticker: str, date: str) -> dict:
        symbol, bars = self._company_bars(ticker)
        day = parse_date(date)
        self._check_range(day)
        if day not in bars:
            raise self._no_trading_error(day)
        return {"ticker": symbol, **bars[day].as_dict()}

    def price_history(self, ticker: str, start_date: str, end_date: str) -> dict:
        symbol, bars = self._company_bars(ticker)
        start, end = parse_date_range(start_date, end_date)
        self._check_range(start)
        self._check_range(end)
        rows = [{"date": d.isoformat(), "close": bar.close} for d, bar in bars.items() if start <= d <= end]
        return history_result(symbol, start, end, rows)

    def crypto_price(self, symbol: str, date: str) -> dict:
        pair = normalize_crypto_symbol(symbol)
        if pair not in self.data.crypto:
            if normalize_ticker(symbol) in self.data.stocks:
                raise ToolError("Not a crypto symbol but a stock ticker: get_stock_price gives stock prices")
            raise lookup_error("crypto symbol", "search_tickers", "coin name")
        day = parse_date(date)
        self._check_range(day)
        return {"symbol": pair, **self.data.crypto[pair][day].as_dict()}

    def company_profile(self, ticker: str) -> dict:
        symbol, _ = self._company_bars(ticker)
        c = self.data.companies[symbol]
        return {
            "ticker": c.ticker,
            "name": c.name,
            "exchange": c.exchange,
            "sector": c.sector,
            "industry": c.industry,
            "employees": c.employees,
        }

    def financials(self, ticker: str, period: str) -> dict:
        symbol, _ = self._company_bars(ticker)
        key = normalize_period(period)
        rows = self.data.financials[symbol]
        if key not in rows:
            raise ToolError(f"No financials for {key}: available periods are 2023-Q1 .. 2024-Q4, FY2023, FY2024")
        row = rows[key]
        return {
            "ticker": symbol,
            "period": key,
            "revenue_usd_millions": row["revenue"],
            "net_income_usd_millions": row["net_income"],
            "eps": row["eps"],
        }

    def search_tickers(self, query: str) -> dict:
        words = str(query).casefold().split()
        if not words:
            raise ToolError("query is empty: pass part of a company name or ticker, e.g. 'robotics'")
        candidates = [(c.ticker, c.name, "stock") for c in self.data.companies.values()]
        candidates += [(p.symbol, p.name, "crypto") for p in self.data.crypto_pairs.values()]
        matches = [
            {"ticker": ticker, "name": name, "type": kind}
            for ticker, name, kind in candidates
            if _has_every_word(words, f"{ticker} {name}")
        ]
        return {"query": query, "results": matches[:MAX_SEARCH_RESULTS]}
