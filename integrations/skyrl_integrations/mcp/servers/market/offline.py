"""Offline backend of the market server: answers every tool from :data:`.data.MARKET`.

Both backends (this one and :mod:`.live`) return the same small dicts and raise ``ToolError`` with a message the model
can act on (a valid ticker list, the nearest trading days, the covered date range).
"""

from __future__ import annotations

import datetime as dt
import re

from .._common import ToolError, unknown_value_error
from .data import FIRST_DAY, HOLIDAYS, LAST_DAY, MARKET, Bar, Company, CryptoPair, MarketData

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


def parse_date(value: str, arg: str = "date") -> dt.date:
    try:
        return dt.date.fromisoformat(str(value).strip())
    except ValueError:
        raise ToolError(f"Invalid {arg} {value!r}: use YYYY-MM-DD, e.g. 2024-03-15") from None


def _alphanumeric(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", str(text).casefold())


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

    def _company_bars(self, ticker: str, tool: str) -> tuple[str, dict[dt.date, Bar]]:
        """The company's ticker and bars; an unknown ticker raises an error naming the call to make instead (``tool``
        is the tool being run, for a company name passed as its ticker)."""
        symbol = normalize_ticker(ticker)
        if symbol not in self.data.stocks:
            pair_symbol = normalize_crypto_symbol(symbol)
            if pair_symbol in self.data.crypto:
                raise ToolError(f"{symbol!r} is a crypto pair: use get_crypto_price with symbol {pair_symbol}")
            pair = self._pair_named(ticker)
            if pair is not None:
                raise ToolError(
                    f"{symbol!r} is not a stock ticker: {pair.name} is a crypto pair, use get_crypto_price with "
                    f"symbol {pair.symbol}"
                )
            company = self._company_named(ticker)
            if company is not None:
                raise ToolError(
                    f"{symbol!r} is not a stock ticker: {company.name} is {company.ticker}, use {tool} with ticker "
                    f"{company.ticker}"
                )
            raise unknown_value_error("ticker", symbol, self.data.stocks)
        return symbol, self.data.stocks[symbol]

    def _company_named(self, name: str) -> Company | None:
        """The one company whose name contains every word of ``name`` ("Microsoft"), or its letters and digits run
        together ("ExxonMobil"), else ``None``."""
        words = str(name).casefold().split()
        letters = _alphanumeric(name)

        def is_named(company: Company) -> bool:
            return _has_every_word(words, company.name) or (
                len(letters) >= 3 and letters in _alphanumeric(company.name)
            )

        named = [c for c in self.data.companies.values() if words and is_named(c)]
        return named[0] if len(named) == 1 else None

    def _pair_named(self, name: str) -> CryptoPair | None:
        """The crypto pair whose name (e.g. "Ethereum") is ``name``, ignoring case and spaces."""
        wanted = "".join(str(name).split()).casefold()
        return next((p for p in self.data.crypto_pairs.values() if p.name.casefold() == wanted), None)

    def _check_range(self, day: dt.date) -> None:
        if not FIRST_DAY <= day <= LAST_DAY:
            raise ToolError(f"No data for {day}: prices cover {FIRST_DAY} to {LAST_DAY}")

    def _no_trading_error(self, day: dt.date) -> ToolError:
        reason = f"{HOLIDAYS[day]}, a market holiday" if day in HOLIDAYS else f"a {day:%A}"
        before = max((d for d in self.data.trading_days if d < day), default=None)
        after = min((d for d in self.data.trading_days if d > day), default=None)
        nearest = " and ".join(str(d) for d in (before, after) if d is not None)
        return ToolError(f"No trading on {day} ({reason}). Nearest trading days: {nearest}")

    def stock_price(self, ticker: str, date: str) -> dict:
        symbol, bars = self._company_bars(ticker, "get_stock_price")
        day = parse_date(date)
        self._check_range(day)
        if day not in bars:
            raise self._no_trading_error(day)
        return {"ticker": symbol, **bars[day].as_dict()}

    def price_history(self, ticker: str, start_date: str, end_date: str) -> dict:
        symbol, bars = self._company_bars(ticker, "get_price_history")
        start, end = parse_date_range(start_date, end_date)
        self._check_range(start)
        self._check_range(end)
        rows = [{"date": d.isoformat(), "close": bar.close} for d, bar in bars.items() if start <= d <= end]
        return history_result(symbol, start, end, rows)

    def crypto_price(self, symbol: str, date: str) -> dict:
        pair = normalize_crypto_symbol(symbol)
        if pair not in self.data.crypto:
            if normalize_ticker(symbol) in self.data.stocks:
                ticker = normalize_ticker(symbol)
                raise ToolError(f"{ticker!r} is a stock: use get_stock_price with ticker {ticker}")
            named = self._pair_named(symbol)
            if named is not None:
                raise ToolError(
                    f"Unknown crypto symbol {pair!r}: {named.name} is {named.symbol}, use get_crypto_price with symbol "
                    f"{named.symbol}"
                )
            raise unknown_value_error("crypto symbol", symbol, self.data.crypto)
        day = parse_date(date)
        self._check_range(day)
        return {"symbol": pair, **self.data.crypto[pair][day].as_dict()}

    def company_profile(self, ticker: str) -> dict:
        symbol, _ = self._company_bars(ticker, "get_company_profile")
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
        symbol, _ = self._company_bars(ticker, "get_financials")
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
