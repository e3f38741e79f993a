"""The offline market data set, generated deterministically in code at import (no files, no network, ~20 ms).

Universe: 20 stocks (12 well-known tickers with synthetic prices and figures, 8 fictional companies that the search
server's corpus describes) and 5 crypto pairs. Prices are daily OHLCV for calendar year 2024 (the NYSE trading
calendar for stocks, every day for crypto); financials are calendar quarters 2023-Q1 .. 2024-Q4 plus FY2023/FY2024.

Every number comes from a ``random.Random`` seeded by the symbol's name, and the walk only uses ``random()`` and
IEEE arithmetic (no libm calls), so values are identical on every platform and Python version.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass

FIRST_DAY = dt.date(2024, 1, 1)
LAST_DAY = dt.date(2024, 12, 31)

# NYSE full-day closures in 2024.
HOLIDAYS: dict[dt.date, str] = {
    dt.date(2024, 1, 1): "New Year's Day",
    dt.date(2024, 1, 15): "Martin Luther King Jr. Day",
    dt.date(2024, 2, 19): "Washington's Birthday",
    dt.date(2024, 3, 29): "Good Friday",
    dt.date(2024, 5, 27): "Memorial Day",
    dt.date(2024, 6, 19): "Juneteenth",
    dt.date(2024, 7, 4): "Independence Day",
    dt.date(2024, 9, 2): "Labor Day",
    dt.date(2024, 11, 28): "Thanksgiving Day",
    dt.date(2024, 12, 25): "Christmas Day",
}


@dataclass(frozen=True)
class Company:
    ticker: str
    name: str
    exchange: str
    sector: str
    industry: str
    employees: int
    start_price: float
    daily_vol: float  # standard deviation of daily returns
    quarterly_revenue_m: float  # revenue of 2023-Q1, USD millions
    net_margin: float
    shares_m: float  # shares outstanding, millions (for EPS)
    fictional: bool = False


@dataclass(frozen=True)
class CryptoPair:
    symbol: str  # canonical form, e.g. "BTCUSD"
    name: str
    start_price: float
    daily_vol: float


# fmt: off
COMPANIES: tuple[Company, ...] = (
    # ticker, name, exchange, sector, industry, employees, start price, daily vol, 2023-Q1 revenue $M, net margin,
    # shares (M)
    Company("AAPL", "Apple Inc.", "NASDAQ", "Technology", "Consumer Electronics", 161000, 185.6, 0.014, 117150, 0.25, 15550),
    Company("MSFT", "Microsoft Corporation", "NASDAQ", "Technology", "Software - Infrastructure", 221000, 370.9, 0.013, 52860, 0.34, 7430),
    Company("NVDA", "NVIDIA Corporation", "NASDAQ", "Technology", "Semiconductors", 29600, 48.2, 0.030, 7190, 0.42, 24600),
    Company("AMZN", "Amazon.com, Inc.", "NASDAQ", "Consumer Cyclical", "Internet Retail", 1525000, 149.9, 0.018, 127360, 0.06, 10400),
    Company("GOOGL", "Alphabet Inc.", "NASDAQ", "Communication Services", "Internet Content & Information", 182000, 138.2, 0.017, 69790, 0.24, 12500),
    Company("META", "Meta Platforms, Inc.", "NASDAQ", "Communication Services", "Internet Content & Information", 67300, 344.5, 0.022, 28650, 0.30, 2560),
    Company("TSLA", "Tesla, Inc.", "NASDAQ", "Consumer Cyclical", "Auto Manufacturers", 140000, 248.4, 0.033, 23330, 0.10, 3180),
    Company("JPM", "JPMorgan Chase & Co.", "NYSE", "Financial Services", "Banks - Diversified", 309900, 170.3, 0.011, 38350, 0.32, 2880),
    Company("XOM", "Exxon Mobil Corporation", "NYSE", "Energy", "Oil & Gas Integrated", 62000, 100.2, 0.013, 86560, 0.12, 3970),
    Company("JNJ", "Johnson & Johnson", "NYSE", "Healthcare", "Drug Manufacturers - General", 131900, 157.0, 0.009, 24750, 0.18, 2410),
    Company("KO", "The Coca-Cola Company", "NYSE", "Consumer Defensive", "Beverages - Non-Alcoholic", 79100, 59.1, 0.008, 10980, 0.23, 4310),
    Company("WMT", "Walmart Inc.", "NYSE", "Consumer Defensive", "Discount Stores", 2100000, 52.5, 0.010, 152300, 0.03, 8050),
    Company("HLXR", "Helix Robotics Inc.", "NASDAQ", "Industrials", "Specialty Industrial Machinery", 4200, 36.4, 0.028, 410, 0.08, 160, True),
    Company("NWGD", "Northwind Grid Corp.", "NYSE", "Utilities", "Utilities - Renewable", 2900, 22.8, 0.015, 620, 0.11, 310, True),
    Company("QBTL", "Quillbright Labs Inc.", "NASDAQ", "Healthcare", "Biotechnology", 850, 14.6, 0.038, 95, -0.20, 120, True),
    Company("SRVN", "Saraven Foods Co.", "NYSE", "Consumer Defensive", "Packaged Foods", 12400, 61.3, 0.010, 1840, 0.07, 210, True),
    Company("TRLX", "Terralux Mining Ltd.", "NYSE", "Basic Materials", "Copper", 6100, 27.9, 0.024, 980, 0.14, 450, True),
    Company("VLMR", "Velamar Aerospace Corp.", "NYSE", "Industrials", "Aerospace & Defense", 18300, 118.7, 0.016, 3120, 0.09, 180, True),
    Company("CDRW", "Cedarwave Software Inc.", "NASDAQ", "Technology", "Software - Application", 3100, 83.5, 0.025, 265, 0.15, 95, True),
    Company("PMBK", "Pinemoor Bancorp", "NYSE", "Financial Services", "Banks - Regional", 2200, 41.2, 0.012, 310, 0.27, 140, True),
)
# fmt: on

CRYPTO_PAIRS: tuple[CryptoPair, ...] = (
    CryptoPair("BTCUSD", "Bitcoin", 42450.0, 0.028),
    CryptoPair("ETHUSD", "Ethereum", 2310.0, 0.032),
    CryptoPair("SOLUSD", "Solana", 101.5, 0.045),
    CryptoPair("XRPUSD", "XRP", 0.6150, 0.035),
    CryptoPair("DOGEUSD", "Dogecoin", 0.0905, 0.045),
)

QUARTERS: tuple[str, ...] = tuple(f"{year}-Q{q}" for year in (2023, 2024) for q in (1, 2, 3, 4))
FISCAL_YEARS: tuple[str, ...] = ("FY2023", "FY2024")


@dataclass(frozen=True)
class Bar:
    date: dt.date
    open: float
    high: float
    low: float
    close: float
    volume: float

    def as_dict(self) -> dict:
        return {
            "date": self.date.isoformat(),
            "open": self.open,
            "high": self.high,
            "low": self.low,
            "close": self.close,
            "volume": self.volume,
        }


def trading_days() -> list[dt.date]:
    """NYSE trading days of 2024 (252 days)."""
    return [d for d in _all_days() if d.weekday() < 5 and d not in HOLIDAYS]


def _all_days() -> list[dt.date]:
    return [FIRST_DAY + dt.timedelta(days=i) for i in range((LAST_DAY - FIRST_DAY).days + 1)]


def _normalish(rng: random.Random) -> float:
    """Mean 0, variance 1 (Irwin-Hall with 4 uniforms): only ``random()`` and arithmetic, so bit-identical everywhere."""
    return (rng.random() + rng.random() + rng.random() + rng.random() - 2.0) * 1.7320508075688772


def _walk(seed: str, days: list[dt.date], start: float, vol: float, base_volume: float, crypto: bool) -> list[Bar]:
    """A seeded random walk of daily bars. Stocks: cents and whole shares; crypto: 4 decimals below $10, fractional
    volume."""

    def _price_round(value: float) -> float:
        return round(value, 4) if crypto and value < 10 else round(value, 2)

    rng = random.Random(seed)
    bars: list[Bar] = []
    prev_close = start
    for day in days:
        open_ = _price_round(prev_close * (1 + vol / 3 * _normalish(rng)))
        close = _price_round(prev_close * (1 + 0.0004 + vol * _normalish(rng)))
        high = _price_round(max(open_, close) * (1 + vol / 2 * abs(_normalish(rng))))
        low = _price_round(min(open_, close) * (1 - vol / 2 * abs(_normalish(rng))))
        volume = base_volume * (1 + 0.25 * _normalish(rng))
        bars.append(Bar(day, open_, high, low, close, round(volume, 2) if crypto else int(volume)))
        prev_close = close
    return bars


def _financials(company: Company) -> dict[str, dict]:
    rng = random.Random(f"financials:{company.ticker}")
    seasonal = (0.97, 0.99, 1.0, 1.06)
    rows: dict[str, dict] = {}
    for i, quarter in enumerate(QUARTERS):
        growth = (1 + 0.015 + 0.02 * _normalish(rng)) ** i
        revenue = round(company.quarterly_revenue_m * growth * seasonal[i % 4] * (1 + 0.02 * _normalish(rng)), 1)
        net_income = round(revenue * company.net_margin * (1 + 0.08 * _normalish(rng)), 1)
        rows[quarter] = {"revenue": revenue, "net_income": net_income, "eps": round(net_income / company.shares_m, 2)}
    for fiscal_year in FISCAL_YEARS:
        quarters = [rows[f"{fiscal_year[2:]}-Q{q}"] for q in (1, 2, 3, 4)]
        rows[fiscal_year] = {
            "revenue": round(sum(q["revenue"] for q in quarters), 1),
            "net_income": round(sum(q["net_income"] for q in quarters), 1),
            "eps": round(sum(q["eps"] for q in quarters), 2),
        }
    return rows


class MarketData:
    """All offline data, indexed for the tools: ``stocks[ticker][date] -> Bar``, ``crypto[symbol][date] -> Bar``,
    ``financials[ticker][period] -> {revenue, net_income, eps}`` (USD millions; EPS in USD)."""

    def __init__(self) -> None:
        stock_days = trading_days()
        crypto_days = _all_days()
        self.companies: dict[str, Company] = {c.ticker: c for c in COMPANIES}
        self.crypto_pairs: dict[str, CryptoPair] = {p.symbol: p for p in CRYPTO_PAIRS}
        self.trading_days: list[dt.date] = stock_days
        self.stocks: dict[str, dict[dt.date, Bar]] = {}
        for c in COMPANIES:
            base_volume = 4e8 / c.start_price * (c.shares_m / 1000) ** 0.5
            bars = _walk(f"stock:{c.ticker}", stock_days, c.start_price, c.daily_vol, base_volume, crypto=False)
            self.stocks[c.ticker] = {bar.date: bar for bar in bars}
        self.crypto: dict[str, dict[dt.date, Bar]] = {}
        for p in CRYPTO_PAIRS:
            bars = _walk(
                f"crypto:{p.symbol}", crypto_days, p.start_price, p.daily_vol, 2e9 / p.start_price, crypto=True
            )
            self.crypto[p.symbol] = {bar.date: bar for bar in bars}
        self.financials: dict[str, dict[str, dict]] = {c.ticker: _financials(c) for c in COMPANIES}


MARKET = MarketData()
