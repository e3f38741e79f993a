"""Rule-based synthetic questions over the bundled MCP servers, with ground truth computed by calling the servers.

Each template (``TEMPLATES``) samples a natural question from the servers' data (tickers and trading days, corpus
entities, the Slack workspace, small maths problems) together with the tool calls that answer it. The generator then
*runs those calls* against the real server processes (``MCPToolGroup``) and reads the expected answer out of their
outputs; a call that fails is a generator bug and stops the run, a draft whose outputs do not support an answer
(e.g. a search that does not surface the page) is dropped.

Complexities: ``single`` (one call), ``multi_step`` (several calls on one server, e.g. two prices and a
difference, or a search then the page), ``cross_server`` (e.g. find a company's ticker with web search, then its
price). Rows follow ``schema.TaskRow``; ``data_source`` is ``mcp/<server of the first call>``.

Free-text arguments (a search query, a Python program) are not part of a row's ``params``: any query or program
that gets the answer is right. Every other argument (ticker, date, URL, thread ts, ...) is. A call whose template
says what it ``finds`` (the ticker a company-name search has to surface) gets it as the step's ``result_contains``.

Train and validation come from one stream of distinct questions, split by the hash of ``task_id``
(``io.split_for``), so no question is in both and the same seed gives byte-identical files::

    python -m skyrl_integrations.datasets.rule_based --output-dir data/mcp --train-size 512 --val-size 64 \\
        --seed 0 --complexities single --servers market

With ``--held-out-entities`` the split is by entity instead, for the templates that hold entities out
(``price_field``, ``price_field_by_name``, ``financial_field``, ``month_end_close``): held-out questions name only
`HELD_OUT_COMPANIES` and `HELD_OUT_MONTHS`, training questions never do, and ``--seen-val-size`` adds held-out
questions about training entities. Each row's ``extra_info`` records its ``entity``, the ``entity_text`` the question
writes and its ``entity_split`` (``train``, ``unseen`` or ``seen``)::

    python -m skyrl_integrations.datasets.rule_based --output-dir data/mcp --train-size 72 --val-size 64 \\
        --seen-val-size 16 --held-out-entities --complexities single,multi_step \\
        --templates price_field,price_field_by_name,financial_field,month_end_close
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from skyrl_gym.common.progress import Progress
from skyrl_integrations.datasets.io import split_for, write_dataset
from skyrl_integrations.datasets.schema import COMPLEXITIES, DATA_SOURCE_PREFIX, TaskRow, ToolStep
from skyrl_integrations.mcp.scoring import ISO_DATE, NUMERIC_REL_TOL, numbers_in

__all__ = [
    "SYSTEM_PROMPT",
    "TEMPLATES",
    "Call",
    "Draft",
    "TaskGenerationError",
    "Template",
    "ToolRunner",
    "answer_tolerance",
    "generate_tasks",
    "main",
]

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a helpful assistant with tools. Use the tools to look up what you need, then give the final answer "
    "as a short plain message."
)
FREE_TEXT_ARGUMENTS: dict[tuple[str, str], frozenset[str]] = {
    ("search", "web_search"): frozenset({"query", "max_results"}),
    ("python", "run_python"): frozenset({"code", "timeout_s"}),
    ("slack", "search_messages"): frozenset({"query"}),
    ("market", "search_tickers"): frozenset({"query"}),
}
"""Arguments left out of a row's ``params``: the model's own wording of them is as good as ours."""
EXTRA_TOOL_BUDGET = 3
"""``limits.max_tools`` = steps + this: room for a lookup or a retry with another tool before the reward is capped."""
EXTRA_TURNS = 1
"""Default ``extra_turns``: ``max_turns`` = a turn per step, one to answer, and this many more (room for a look-up
or a corrected call)."""
MAX_ATTEMPTS_PER_TASK = 40


class TaskGenerationError(RuntimeError):
    """Questions cannot be generated: bad options, a failing tool call, or too few distinct questions."""


@dataclass(frozen=True)
class Call:
    """One tool call of a draft. ``arguments`` may be a function of the previous calls' outputs (dependent steps)."""

    server: str
    tool: str
    arguments: dict[str, Any] | Callable[[list[Any]], dict[str, Any]]
    finds: str | None = None
    """What its result must contain to count (the step's ``result_contains``): for a free-text call, the value the
    next call needs."""


@dataclass(frozen=True)
class Draft:
    """A question, the calls that answer it and how to read the answer from their outputs (``None``: drop it)."""

    question: str
    calls: tuple[Call, ...]
    answer: Callable[[list[Any]], str | None]
    answer_match: str = "numeric"
    entity: str | None = None
    """What the question is about, for templates that hold entities out (a ticker, or ticker/month)."""
    entity_text: str | None = None
    """The entity as the question writes it (a ticker or a company name)."""
    hint: str | None = None
    """A sentence naming the tools and the field that answer the question, added to a share of the training
    questions (``hint_fraction``), never to held-out ones: the signal for a template the starting policy never
    solves."""


@dataclass(frozen=True)
class Template:
    name: str
    complexity: str
    servers: tuple[str, ...]
    make: Callable[[random.Random, Universe], Draft]
    holds_out: bool = False
    """Whether its questions draw their entities from `Universe.companies` / `Universe.months` only, so that
    ``held_out_entities`` can keep them out of training."""


TEMPLATES: dict[str, Template] = {}


def _template(name: str, complexity: str, *servers: str, holds_out: bool = False):
    def register(make: Callable[[random.Random, Universe], Draft]) -> Callable[[random.Random, Universe], Draft]:
        TEMPLATES[name] = Template(name, complexity, servers, make, holds_out)
        return make

    return register


# ----------------------------------------------------------------------------------------------- sampling data


HELD_OUT_COMPANIES = frozenset({"JNJ", "KO", "MSFT", "TSLA", "PMBK", "QBTL", "TRLX"})
"""Under ``held_out_entities`` only held-out questions name these companies: four real ones and three fictional
ones (never CDRW, which examples/mcp/demonstrations.json shows)."""
HELD_OUT_MONTHS = frozenset({3, 6, 9, 12})
"""Under ``held_out_entities`` only held-out questions ask about these months of 2024 (March and June end on a
weekend, September and December on a trading day, as do two of the eight training months)."""
ENTITY_POOLS = ("all", "train", "held_out")


class Universe:
    """What templates sample from: the servers' own data modules, loaded on first use. ``entities`` picks the
    companies and months of templates that hold entities out: ``all``, those of ``train`` or the ``held_out`` ones."""

    def __init__(self, entities: str = "all") -> None:
        if entities not in ENTITY_POOLS:
            raise TaskGenerationError(f"entities must be one of {ENTITY_POOLS}, got {entities!r}")
        self.entities = entities

    def _in_pool(self, held_out: bool) -> bool:
        return self.entities == "all" or (self.entities == "held_out") == held_out

    @cached_property
    def companies(self) -> list:
        """The companies of this pool, by ticker."""
        return [self.market.companies[t] for t in self.tickers if self._in_pool(t in HELD_OUT_COMPANIES)]

    @cached_property
    def months(self) -> list[int]:
        """The months of 2024 of this pool."""
        return [m for m in range(1, 13) if self._in_pool(m in HELD_OUT_MONTHS)]

    @cached_property
    def market(self):
        from skyrl_integrations.mcp.servers.market.data import MARKET

        return MARKET

    @cached_property
    def tickers(self) -> list[str]:
        return sorted(self.market.companies)

    @cached_property
    def well_known_companies(self) -> list:
        """The real companies (a model may know their tickers), by ticker; the fictional ones only search finds."""
        return [self.market.companies[t] for t in self.tickers if not self.market.companies[t].fictional]

    @cached_property
    def stock_days(self) -> list[str]:
        return [d.isoformat() for d in self.market.trading_days]

    @cached_property
    def crypto_days(self) -> list[str]:
        return sorted(d.isoformat() for d in self.market.crypto["BTCUSD"])

    @cached_property
    def corpus(self) -> dict[str, list[dict]]:
        from skyrl_integrations.mcp.servers.search.corpus import load_corpus

        by_kind: dict[str, list[dict]] = {}
        for doc in load_corpus():
            by_kind.setdefault(doc["kind"], []).append(doc)
        return by_kind

    @cached_property
    def slack(self):
        from skyrl_integrations.mcp.servers.slack.seed import build_workspace

        return build_workspace()


def _number(value: float | int) -> str:
    """A number as an answer string: integers plain, others with up to 4 decimals and no trailing zeros."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.4f}".rstrip("0").rstrip(".")


_NUMBER_TEXT = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _mentions(output: Any, value: Any) -> bool:
    """Whether a tool output (JSON or text) states ``value`` (numbers compared as numbers: "16,258" == 16258)."""
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    if isinstance(value, int | float):
        return any(float(m.replace(",", "")) == float(value) for m in _NUMBER_TEXT.findall(text))
    return str(value).casefold() in text.casefold()


def _fact_if_stated(value: Any, *outputs: Any) -> str | None:
    """``value`` as the expected answer when one of ``outputs`` states it, else ``None`` (the draft is dropped)."""
    if not any(_mentions(output, value) for output in outputs):
        return None
    return _number(value) if isinstance(value, int | float) else str(value)


# ----------------------------------------------------------------------------------------------- market


_STOCK_FIELDS = {
    "close_price": ("close", "What was the closing price of {t} on {d}?"),
    "open_price": ("open", "What was the opening price of {t} on {d}?"),
    "high_price": ("high", "What was the highest price of {t} on {d}?"),
    "low_price": ("low", "What was the lowest price of {t} on {d}?"),
    "volume": ("volume", "How many {t} shares traded on {d}?"),
}


def _stock_field_template(name: str, key: str, question: str) -> None:
    @_template(name, "single", "market")
    def make(rng: random.Random, u: Universe) -> Draft:
        ticker, day = rng.choice(u.tickers), rng.choice(u.stock_days)
        call = Call("market", "get_stock_price", {"ticker": ticker, "date": day})
        return Draft(question.format(t=ticker, d=day), (call,), lambda out: _number(out[0][key]))


for _name, (_key, _question) in _STOCK_FIELDS.items():
    _stock_field_template(_name, _key, _question)


def _crypto_close_template(name: str, question: str) -> None:
    @_template(name, "single", "market")
    def make(rng: random.Random, u: Universe) -> Draft:
        pair = rng.choice(sorted(u.market.crypto_pairs.values(), key=lambda p: p.symbol))
        day = rng.choice(u.crypto_days)
        call = Call("market", "get_crypto_price", {"symbol": pair.symbol, "date": day})
        return Draft(question.format(n=pair.name, s=pair.symbol, d=day), (call,), lambda out: _number(out[0]["close"]))


_crypto_close_template("crypto_close", "What was the closing price of {n} ({s}) on {d}?")
_crypto_close_template("crypto_close_by_name", "What was the closing price of {n} on {d}?")  # the symbol is the agent's


@_template("employees", "single", "market")
def _employees(rng: random.Random, u: Universe) -> Draft:
    ticker = rng.choice(u.tickers)
    call = Call("market", "get_company_profile", {"ticker": ticker})
    return Draft(f"How many employees does {ticker} have?", (call,), lambda out: _number(out[0]["employees"]))


@_template("employees_by_name", "single", "market")
def _employees_by_name(rng: random.Random, u: Universe) -> Draft:
    """The question names the company, not its ticker: the agent must know it (or look it up with another tool)."""
    company = rng.choice(u.well_known_companies)
    call = Call("market", "get_company_profile", {"ticker": company.ticker})
    question = f"How many employees does {company.name} have?"
    return Draft(question, (call,), lambda out: _number(out[0]["employees"]))


@_template("close_by_name", "single", "market")
def _close_by_name(rng: random.Random, u: Universe) -> Draft:
    company, day = rng.choice(u.well_known_companies), rng.choice(u.stock_days)
    call = Call("market", "get_stock_price", {"ticker": company.ticker, "date": day})
    question = f"What was the closing price of {company.name} stock on {day}?"
    return Draft(question, (call,), lambda out: _number(out[0]["close"]))


@_template("sector", "single", "market")
def _sector(rng: random.Random, u: Universe) -> Draft:
    ticker = rng.choice(u.tickers)
    call = Call("market", "get_company_profile", {"ticker": ticker})
    return Draft(f"Which sector is {ticker} in?", (call,), lambda out: out[0]["sector"], "contains")


_FINANCIAL_FIELDS = {
    "revenue": ("revenue_usd_millions", "What was {t}'s revenue in {p}, in millions of USD?"),
    "net_income": ("net_income_usd_millions", "What was {t}'s net income in {p}, in millions of USD?"),
    "eps": ("eps", "What was {t}'s earnings per share (EPS) in {p}?"),
}
_PERIODS = ("2023-Q1", "2023-Q2", "2023-Q3", "2023-Q4", "2024-Q1", "2024-Q2", "2024-Q3", "2024-Q4", "FY2023", "FY2024")


def _financial_template(name: str, key: str, question: str) -> None:
    @_template(name, "single", "market")
    def make(rng: random.Random, u: Universe) -> Draft:
        ticker, period = rng.choice(u.tickers), rng.choice(_PERIODS)
        call = Call("market", "get_financials", {"ticker": ticker, "period": period})
        return Draft(question.format(t=ticker, p=period), (call,), lambda out: _number(out[0][key]))


for _name, (_key, _question) in _FINANCIAL_FIELDS.items():
    _financial_template(_name, _key, _question)


@_template("max_close_in_week", "single", "market")
def _max_close_in_week(rng: random.Random, u: Universe) -> Draft:
    ticker = rng.choice(u.tickers)
    start = rng.randrange(len(u.stock_days) - 5)
    first, last = u.stock_days[start], u.stock_days[start + 4]
    call = Call("market", "get_price_history", {"ticker": ticker, "start_date": first, "end_date": last})
    question = f"What was the highest closing price of {ticker} between {first} and {last}?"
    return Draft(question, (call,), lambda out: _number(max(r["close"] for r in out[0]["results"])))


@_template("close_change", "multi_step", "market")
def _close_change(rng: random.Random, u: Universe) -> Draft:
    ticker = rng.choice(u.tickers)
    first, second = sorted(rng.sample(u.stock_days, 2))
    calls = (
        Call("market", "get_stock_price", {"ticker": ticker, "date": first}),
        Call("market", "get_stock_price", {"ticker": ticker, "date": second}),
    )
    question = f"What is {ticker}'s closing price on {second} minus its closing price on {first}?"
    return Draft(question, calls, lambda out: _number(round(out[1]["close"] - out[0]["close"], 2)))


@_template("combined_close", "multi_step", "market")
def _combined_close(rng: random.Random, u: Universe) -> Draft:
    first, second = rng.sample(u.tickers, 2)
    day = rng.choice(u.stock_days)
    calls = (
        Call("market", "get_stock_price", {"ticker": first, "date": day}),
        Call("market", "get_stock_price", {"ticker": second, "date": day}),
    )
    question = f"What was the sum of the closing prices of {first} and {second} on {day}?"
    return Draft(question, calls, lambda out: _number(round(out[0]["close"] + out[1]["close"], 2)))


@_template("crypto_change", "multi_step", "market")
def _crypto_change(rng: random.Random, u: Universe) -> Draft:
    pair = rng.choice(sorted(u.market.crypto_pairs))
    first, second = sorted(rng.sample(u.crypto_days, 2))
    calls = (
        Call("market", "get_crypto_price", {"symbol": pair, "date": first}),
        Call("market", "get_crypto_price", {"symbol": pair, "date": second}),
    )
    question = f"What is {pair}'s closing price on {second} minus its closing price on {first}?"
    return Draft(question, calls, lambda out: _number(round(out[1]["close"] - out[0]["close"], 4)))


@_template("revenue_change", "multi_step", "market")
def _revenue_change(rng: random.Random, u: Universe) -> Draft:
    ticker = rng.choice(u.tickers)
    year = rng.choice((2023, 2024))
    quarter = rng.randrange(1, 4)
    first, second = f"{year}-Q{quarter}", f"{year}-Q{quarter + 1}"
    calls = (
        Call("market", "get_financials", {"ticker": ticker, "period": first}),
        Call("market", "get_financials", {"ticker": ticker, "period": second}),
    )
    question = f"By how many millions of USD did {ticker}'s revenue change from {first} to {second}?"
    key = "revenue_usd_millions"
    return Draft(question, calls, lambda out: _number(round(out[1][key] - out[0][key], 1)))


# Templates that hold their entities out (`Universe.companies`, `Universe.months`): the field asked varies, so no
# fixed answer fits, and the by-name and month-end questions need a call that finds the next call's argument.


@_template("price_field", "single", "market", holds_out=True)
def _price_field(rng: random.Random, u: Universe) -> Draft:
    """Open, high, low, close or volume of a stock named by its ticker."""
    company, day = rng.choice(u.companies), rng.choice(u.stock_days)
    key, question = _STOCK_FIELDS[rng.choice(sorted(_STOCK_FIELDS))]
    call = Call("market", "get_stock_price", {"ticker": company.ticker, "date": day})
    text = question.format(t=company.ticker, d=day)
    hint = f"Hint: get_stock_price gives the day's {key}."
    return Draft(
        text, (call,), lambda out: _number(out[0][key]), entity=company.ticker, entity_text=company.ticker, hint=hint
    )


@_template("price_field_by_name", "multi_step", "market", holds_out=True)
def _price_field_by_name(rng: random.Random, u: Universe) -> Draft:
    """A field of a stock named by its company: `search_tickers` finds the ticker `get_stock_price` takes (a model
    may also know a real company's ticker)."""
    company, day = rng.choice(u.companies), rng.choice(u.stock_days)
    key, question = _STOCK_FIELDS[rng.choice(sorted(_STOCK_FIELDS))]
    calls = (
        Call("market", "search_tickers", {"query": company.name}, finds=company.ticker),
        Call("market", "get_stock_price", lambda out: {"ticker": out[0]["results"][0]["ticker"], "date": day}),
    )

    def answer(out: list[Any]) -> str | None:
        return _number(out[1][key]) if out[1]["ticker"] == company.ticker else None

    text = question.format(t=company.name, d=day)
    hint = f"Hint: search_tickers finds the company's ticker, then get_stock_price gives the day's {key}."
    return Draft(text, calls, answer, entity=company.ticker, entity_text=company.name, hint=hint)


@_template("financial_field", "single", "market", holds_out=True)
def _financial_field(rng: random.Random, u: Universe) -> Draft:
    """Revenue, net income or EPS of a company in a quarter or fiscal year."""
    company, period = rng.choice(u.companies), rng.choice(_PERIODS)
    key, question = _FINANCIAL_FIELDS[rng.choice(sorted(_FINANCIAL_FIELDS))]
    call = Call("market", "get_financials", {"ticker": company.ticker, "period": period})
    text = question.format(t=company.ticker, p=period)
    hint = f"Hint: get_financials gives the period's {key}."
    return Draft(
        text, (call,), lambda out: _number(out[0][key]), entity=company.ticker, entity_text=company.ticker, hint=hint
    )


@_template("month_end_close", "single", "market", holds_out=True)
def _month_end_close(rng: random.Random, u: Universe) -> Draft:
    """The close on the last trading day of a month, which the question does not date: the month's price history
    shows it (its last row)."""
    company, month = rng.choice(u.companies), rng.choice(u.months)
    first = dt.date(2024, month, 1)
    last = dt.date(2024 + month // 12, month % 12 + 1, 1) - dt.timedelta(days=1)
    arguments = {"ticker": company.ticker, "start_date": first.isoformat(), "end_date": last.isoformat()}
    call = Call("market", "get_price_history", arguments)
    question = f"What was the closing price of {company.ticker} on the last trading day of {first:%B} 2024?"
    entity = f"{company.ticker}/{first:%Y-%m}"
    return Draft(
        question,
        (call,),
        lambda out: _number(out[0]["results"][-1]["close"]),
        entity=entity,
        entity_text=company.ticker,
        hint="Hint: get_price_history lists the month's trading days; the last one's close is the answer.",
    )


# ----------------------------------------------------------------------------------------------- search

_SEARCH_FACTS = {
    # name: (document kind, fact, question, answer match, answer in the snippet (single) or page only (multi_step))
    "town_population": ("town", "population", "What is the population of {e}?", "numeric", True),
    "town_founded": ("town", "founded", "In what year was the town of {e} founded?", "numeric", True),
    "town_river": ("town", "river", "Which river is the town of {e} on?", "contains", True),
    "company_founded": ("company", "founded", "In what year was {e} founded?", "numeric", True),
    "company_ceo": ("company", "ceo", "Who is the chief executive of {e}?", "contains", True),
    "company_hq": ("company", "hq", "In which town is {e} headquartered?", "contains", True),
    "product_maker": ("product", "maker", "Which company makes the {e}?", "contains", True),
    "product_price": ("product", "price_usd", "What was the launch price of the {e}, in USD?", "numeric", True),
    "person_born": ("person", "born", "In what year was {e} born?", "numeric", True),
    "listed_ticker": ("listed_company", "ticker", "What is the stock ticker of {e}?", "contains", True),
    "town_elevation": ("town", "elevation_m", "At what elevation, in metres, is the centre of {e}?", "numeric", False),
    "person_award_year": ("person", "award_year", "In what year did {e} receive their award?", "numeric", False),
    "product_warranty": (
        "product",
        "warranty_years",
        "How many years of warranty come with the {e}?",
        "numeric",
        False,
    ),
    "listed_ceo": ("listed_company", "ceo", "Who is the chief executive of {e}?", "contains", False),
}


def _search_fact_template(name: str, kind: str, fact: str, question: str, match: str, in_snippet: bool) -> None:
    @_template(name, "single" if in_snippet else "multi_step", "search")
    def make(rng: random.Random, u: Universe) -> Draft:
        doc = rng.choice(u.corpus[kind])
        value = doc["facts"][fact]
        search = Call("search", "web_search", {"query": doc["entity"], "max_results": 3})
        text = question.format(e=doc["entity"])
        if in_snippet:

            def snippet_answer(out: list[Any]) -> str | None:
                result = _result_for(out[0], doc["url"])
                return None if result is None else _fact_if_stated(value, result)

            return Draft(text, (search,), snippet_answer, match)

        def fetch_args(out: list[Any]) -> dict[str, Any]:
            return {"url": doc["url"]}

        def answer(out: list[Any]) -> str | None:
            if _result_for(out[0], doc["url"]) is None or _mentions(out[0], value):
                return None  # the page must be found by the search, and the fact must need the page
            return _fact_if_stated(value, out[1])

        return Draft(text, (search, Call("search", "fetch_page", fetch_args)), answer, match)


def _result_for(search_output: dict, url: str) -> dict | None:
    """The search result for ``url``, or ``None`` when the search did not return that page."""
    return next((r for r in search_output["results"] if r["url"] == url), None)


for _name, _spec in _SEARCH_FACTS.items():
    _search_fact_template(_name, *_spec)


# ----------------------------------------------------------------------------------------------- search + market


def _listed_docs(u: Universe, kind: str) -> list[dict]:
    return [d for d in u.corpus[kind] if "ticker" in d["facts"]]


@_template("product_maker_close", "cross_server", "search", "market")
def _product_maker_close(rng: random.Random, u: Universe) -> Draft:
    doc = rng.choice(_listed_docs(u, "listed_product"))
    ticker, day = doc["facts"]["ticker"], rng.choice(u.stock_days)
    calls = (
        Call("search", "web_search", {"query": f"{doc['entity']} maker", "max_results": 3}),
        Call("market", "get_stock_price", {"ticker": ticker, "date": day}),
    )
    question = f"The {doc['entity']} is made by a listed company. What was that company's closing price on {day}?"
    return Draft(question, calls, lambda out: _number(out[1]["close"]) if _mentions(out[0], ticker) else None)


@_template("company_revenue", "cross_server", "search", "market")
def _company_revenue(rng: random.Random, u: Universe) -> Draft:
    doc = rng.choice(_listed_docs(u, "listed_company"))
    ticker, period = doc["facts"]["ticker"], rng.choice(_PERIODS)
    calls = (
        Call("search", "web_search", {"query": f"{doc['entity']} stock ticker", "max_results": 3}),
        Call("market", "get_financials", {"ticker": ticker, "period": period}),
    )
    question = f"Find the stock ticker of {doc['entity']}, then tell me its revenue in {period} in millions of USD."
    key = "revenue_usd_millions"
    return Draft(question, calls, lambda out: _number(out[1][key]) if _mentions(out[0], ticker) else None)


# ----------------------------------------------------------------------------------------------- python

_PYTHON_PROBLEMS = {
    # name: (question, program printing the answer, parameter range)
    "sum_of_squares": ("What is the sum of the squares of the integers from 1 to {n}?",
                       "print(sum(i * i for i in range(1, {n} + 1)))", (50, 5000)),
    "fibonacci": ("What is the {n}th Fibonacci number, with F(1) = F(2) = 1?",
                  "a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, a + b\nprint(a)", (30, 90)),
    "prime_count": ("How many prime numbers are smaller than {n}?",
                    "n = {n}\nprint(sum(all(k % d for d in range(2, int(k ** 0.5) + 1)) for k in range(2, n)))",
                    (100, 20000)),
    "digit_sum_power": ("What is the sum of the digits of 2 to the power {n}?",
                        "print(sum(int(c) for c in str(2 ** {n})))", (50, 1000)),
    "factorial_mod": ("What is {n} factorial modulo 1000007?",
                      "import math\nprint(math.factorial({n}) % 1000007)", (20, 3000)),
}  # fmt: skip


def _python_template(name: str, question: str, program: str, bounds: tuple[int, int]) -> None:
    @_template(name, "single", "python")
    def make(rng: random.Random, u: Universe) -> Draft:
        n = rng.randrange(*bounds)
        call = Call("python", "run_python", {"code": program.format(n=n)})
        return Draft(question.format(n=n), (call,), lambda out: _python_stdout_number(out[0]))


def _python_stdout_number(output: dict) -> str | None:
    text = str(output.get("stdout", "")).strip()
    return text if output.get("exit_code") == 0 and re.fullmatch(r"-?\d+(?:\.\d+)?", text) else None


for _name, _spec in _PYTHON_PROBLEMS.items():
    _python_template(_name, *_spec)


@_template("mean_close", "cross_server", "market", "python")
def _mean_close(rng: random.Random, u: Universe) -> Draft:
    ticker = rng.choice(u.tickers)
    start = rng.randrange(len(u.stock_days) - 10)
    first, last = u.stock_days[start], u.stock_days[start + 9]

    def program(out: list[Any]) -> dict[str, Any]:
        closes = [r["close"] for r in out[0]["results"]]
        return {"code": f"closes = {closes}\nprint(round(sum(closes) / len(closes), 2))"}

    calls = (
        Call("market", "get_price_history", {"ticker": ticker, "start_date": first, "end_date": last}),
        Call("python", "run_python", program),
    )
    question = f"What was the average closing price of {ticker} from {first} to {last}, rounded to 2 decimals?"
    return Draft(question, calls, lambda out: _python_stdout_number(out[1]))


# ----------------------------------------------------------------------------------------------- slack


def _slack_parents(u: Universe, pattern: str) -> list:
    return [m for m in u.slack.messages if m.thread_ts is None and re.search(pattern, m.text)]


@_template("user_title", "single", "slack")
def _user_title(rng: random.Random, u: Universe) -> Draft:
    user = rng.choice([user for user in u.slack.users if not user.is_bot])
    call = Call("slack", "get_user", {"user": user.name})
    return Draft(f"What is {user.real_name}'s job title?", (call,), lambda out: out[0]["title"], "contains")


@_template("latest_deploy", "single", "slack")
def _latest_deploy(rng: random.Random, u: Universe) -> Draft:
    service = rng.choice(sorted({m.group(1) for m in map(_DEPLOY.search, _texts(u)) if m}))
    environment = rng.choice(("production", "staging"))
    call = Call("slack", "search_messages", {"query": f"Deployed {service} {environment}"})
    question = f"Which version of {service} was deployed to {environment} most recently?"
    return Draft(question, (call,), lambda out: _latest_version(out[0], service, environment), "contains")


_DEPLOY = re.compile(r"^Deployed (\S+) (v[\d.]+) to (\w+)")


def _texts(u: Universe) -> Iterable[str]:
    return (m.text for m in u.slack.messages)


def _latest_version(output: dict, service: str, environment: str) -> str | None:
    for match in output["matches"]:  # newest first
        found = _DEPLOY.search(match["text"])
        if found and found.group(1) == service and found.group(3) == environment:
            return found.group(2)
    return None


@_template("incident_root_cause", "multi_step", "slack")
def _incident_root_cause(rng: random.Random, u: Universe) -> Draft:
    return _incident_thread_draft(rng, u, "What was the root cause of {incident}?", r"Root cause: (.+)\.$", "contains")


@_template("incident_duration", "multi_step", "slack")
def _incident_duration(rng: random.Random, u: Universe) -> Draft:
    return _incident_thread_draft(
        rng, u, "How many minutes did it take to resolve {incident}?", r"Resolved after (\d+) minutes", "numeric"
    )


def _incident_thread_draft(
    rng: random.Random, u: Universe, question: str, answer_pattern: str, answer_match: str
) -> Draft:
    """Find a random incident's thread in #incidents (search, then read the thread); the answer is group 1 of the
    first thread message matching `answer_pattern`."""
    incident = re.match(r"INC-\d+", rng.choice(_slack_parents(u, r"^INC-\d+")).text).group(0)

    def thread_args(out: list[Any]) -> dict[str, Any]:
        return {"channel": "incidents", "ts": _only_match(out[0])["ts"]}

    def answer(out: list[Any]) -> str | None:
        found = [re.match(answer_pattern, m["text"]) for m in out[1]["messages"]]
        return next((f.group(1) for f in found if f), None)

    calls = (Call("slack", "search_messages", {"query": incident}), Call("slack", "read_thread", thread_args))
    return Draft(question.format(incident=incident), calls, answer, answer_match)


def _only_match(output: dict) -> dict:
    if output["total"] != 1:
        raise TaskGenerationError(f"expected exactly one Slack message for {output['query']!r}, got {output['total']}")
    return output["matches"][0]


# ----------------------------------------------------------------------------------------------- running


class ToolRunner:
    """Calls the bundled servers (one ``MCPToolGroup`` per server) and returns parsed outputs; a tool error raises."""

    def __init__(self) -> None:
        self._groups: dict[str, Any] = {}

    def call(self, server: str, tool: str, arguments: dict[str, Any]) -> Any:
        result = self._group(server).call_tool(tool, arguments)
        if result.is_error:
            raise TaskGenerationError(f"{server}.{tool}({arguments}) failed ({result.error_kind}): {result.text}")
        try:
            return json.loads(result.text)
        except json.JSONDecodeError:
            return result.text

    def tool_names(self, server: str) -> list[str]:
        """The names of every tool ``server`` offers, in its listing order."""
        return [tool["name"] for tool in self._group(server).list_tools()]

    def close(self) -> None:
        for group in self._groups.values():
            group.close()
        self._groups.clear()

    def _group(self, server: str) -> Any:
        from skyrl_integrations.mcp.client import MCPToolGroup
        from skyrl_integrations.mcp.spec import MCPServerSpec

        if server not in self._groups:
            self._groups[server] = MCPToolGroup(MCPServerSpec.bundled(server), max_output_chars=100_000)
        return self._groups[server]


@dataclass
class _Options:
    complexities: tuple[str, ...]
    servers: tuple[str, ...]
    templates: dict[str, list[Template]] = field(default_factory=dict)


def _options(complexities: Sequence[str], servers: Sequence[str], names: Sequence[str] | None) -> _Options:
    unknown = sorted(set(complexities) - set(COMPLEXITIES))
    if unknown or not complexities:
        raise TaskGenerationError(f"complexities must be a non-empty subset of {list(COMPLEXITIES)}, got {unknown}")
    known_servers = sorted({s for t in TEMPLATES.values() for s in t.servers})
    unknown = sorted(set(servers) - set(known_servers))
    if unknown or not servers:
        raise TaskGenerationError(f"servers must be a non-empty subset of {known_servers}, got {list(servers)}")
    unknown = sorted(set(names or ()) - set(TEMPLATES))
    if unknown:
        raise TaskGenerationError(f"unknown templates {unknown}; templates: {sorted(TEMPLATES)}")
    options = _Options(tuple(complexities), tuple(servers))
    for complexity in complexities:
        eligible = [
            t
            for t in TEMPLATES.values()
            if t.complexity == complexity and set(t.servers) <= set(servers) and (names is None or t.name in names)
        ]
        if not eligible:
            hint = (
                "; cross_server questions need two servers, e.g. search,market" if complexity == "cross_server" else ""
            )
            chosen = "" if names is None else f" among templates {list(names)}"
            raise TaskGenerationError(f"no {complexity} templates use only the servers {list(servers)}{chosen}{hint}")
        options.templates[complexity] = eligible
    return options


def _task_id(draft: Draft, template: Template, steps: Sequence[ToolStep]) -> str:
    digest = hashlib.sha1(draft.question.encode("utf-8")).hexdigest()[:10]
    return f"{steps[0].server}-{template.name}-{digest}"


@dataclass(frozen=True)
class _Ran:
    """A draft run against the servers: its steps, the expected answer and the numeric answer's tolerance."""

    steps: list[ToolStep]
    answer: str
    tolerance: float | None


def _run(draft: Draft, runner: ToolRunner) -> _Ran | None:
    outputs: list[Any] = []
    steps: list[ToolStep] = []
    for number, call in enumerate(draft.calls, start=1):
        arguments = call.arguments(outputs) if callable(call.arguments) else call.arguments
        outputs.append(runner.call(call.server, call.tool, arguments))
        free = FREE_TEXT_ARGUMENTS.get((call.server, call.tool), frozenset())
        params = {k: v for k, v in arguments.items() if k not in free}
        steps.append(ToolStep(number, call.server, call.tool, params, call.finds))
    answer = draft.answer(outputs)
    if answer is None:
        return None
    if draft.answer_match != "numeric":
        return _Ran(steps, answer, None)
    tolerance = answer_tolerance(answer, outputs)
    return None if tolerance is None else _Ran(steps, answer, tolerance)


def answer_tolerance(answer: str, outputs: Sequence[Any]) -> float | None:
    """The relative tolerance of a numeric answer: `NUMERIC_REL_TOL`, tightened below half the distance to the
    nearest other number the tool outputs state, so that answering any other field of a record fails. ``None``
    when another field of the outputs has exactly the answer's value (the draft is then dropped: which field the
    agent read could not be told apart)."""
    target = float(answer)
    fields = [value for output in outputs for value in _numeric_fields(output)]
    if sum(value == target for value in fields) > 1:
        return None
    stated = fields + [value for output in outputs for text in _text_fields(output) for value in numbers_in(text)]
    gaps = [abs(value - target) for value in stated if value != target]
    scale = abs(target) or 1.0  # the scorer reads the tolerance as absolute around 0
    return min(NUMERIC_REL_TOL, 0.4 * min(gaps) / scale) if gaps else NUMERIC_REL_TOL


def _leaves(output: Any) -> Iterable[Any]:
    if isinstance(output, dict):
        for value in output.values():
            yield from _leaves(value)
    elif isinstance(output, list):
        for value in output:
            yield from _leaves(value)
    else:
        yield output


def _numeric_fields(output: Any) -> list[float]:
    return [float(v) for v in _leaves(output) if isinstance(v, int | float) and not isinstance(v, bool)]


def _text_fields(output: Any) -> list[str]:
    """The outputs' strings with ISO dates blanked (the scorer does not read dates as numbers)."""
    return [ISO_DATE.sub(" ", v) for v in _leaves(output) if isinstance(v, str)]


def generate_tasks(
    train_size: int,
    val_size: int,
    *,
    seed: int = 0,
    complexities: Sequence[str] = ("single",),
    servers: Sequence[str] = ("market",),
    templates: Sequence[str] | None = None,
    balance_templates: bool = False,
    extra_turns: int = EXTRA_TURNS,
    held_out_entities: bool = False,
    seen_val_size: int = 0,
    hint_fraction: float = 0.0,
    runner: ToolRunner | None = None,
) -> list[TaskRow]:
    """``train_size`` + ``val_size`` distinct tasks, each in the split ``io.split_for(task_id, val_ratio)`` assigns
    with ``val_ratio = val_size / (train_size + val_size)`` (pass that ratio to ``io.write_dataset``).

    Each question draws a complexity uniformly from ``complexities``, then a template uniformly from those of that
    complexity whose servers are all in ``servers`` (and, if given, whose name is in ``templates``). With
    ``balance_templates`` every eligible template gets an equal share of each split instead (the first templates
    one more when a split does not divide evenly). A question's ``max_turns`` is a turn per tool call of its solution,
    one to answer, and ``extra_turns`` more.

    With ``held_out_entities`` the split is by entity instead (then pass ``val_ratio=None`` to ``io.write_dataset``):
    training questions name only training companies and months, the ``val_size`` held-out ones only
    `HELD_OUT_COMPANIES` and `HELD_OUT_MONTHS` (``extra_info.entity_split`` "unseen"), and ``seen_val_size`` more
    held-out questions name training entities in questions training does not ask ("seen", ``data_source`` ending in
    ``/seen``); every template must hold entities out (`Template.holds_out`) and gets an equal share of each.

    With ``hint_fraction`` > 0, that share of the training questions whose template has a hint (`Draft.hint`) end
    with it (``extra_info.hint``: the text added, which ``generator.train_without_hints`` cuts from the prompt the loss
    sees), chosen by the hash of the task id, so the questions and their split do not change; held-out questions never
    do.

    Every row offers the agent every tool of ``servers`` (``extra_info.servers`` / ``extra_info.tools``), so the
    tool is the agent's choice; ``data_source`` is ``mcp/<server of the first call>/<template>``, so eval figures
    come per template."""
    if min(train_size, val_size, seen_val_size) < 0 or train_size + val_size == 0:
        raise TaskGenerationError(f"need a positive number of tasks, got train={train_size} validation={val_size}")
    if extra_turns < 0:
        raise TaskGenerationError(f"extra_turns must be >= 0, got {extra_turns}")
    if seen_val_size and not held_out_entities:
        raise TaskGenerationError("seen_val_size needs held_out_entities: without it every entity is seen")
    if not 0.0 <= hint_fraction <= 1.0:
        raise TaskGenerationError(f"hint_fraction must be between 0 and 1, got {hint_fraction}")
    options = _options(complexities, servers, templates)
    eligible = list({t.name: t for ts in options.templates.values() for t in ts}.values())
    if held_out_entities:
        _check_holds_out(eligible)
    owned = runner is None
    runner = runner or ToolRunner()
    total = train_size + val_size + seen_val_size
    try:
        with Progress(total, "generate questions", unit="question", logger=logger) as progress:
            maker = _RowMaker(
                options,
                runner,
                extra_turns,
                max_drafts=MAX_ATTEMPTS_PER_TASK * total,
                progress=progress,
                hint_fraction=hint_fraction,
            )
            rng = random.Random(seed)
            if held_out_entities:
                return _by_entity(maker, rng, eligible, train_size, val_size, seen_val_size)
            return _by_hash(maker, rng, options, eligible, train_size, val_size, balance_templates)
    finally:
        if owned:
            runner.close()


def _check_holds_out(templates: Sequence[Template]) -> None:
    others = sorted(t.name for t in templates if not t.holds_out)
    if others:
        holding = sorted(t.name for t in TEMPLATES.values() if t.holds_out)
        raise TaskGenerationError(
            f"held_out_entities: templates {others} do not hold entities out; choose among {holding} (--templates)"
        )


class _RowMaker:
    """Turns drafts into rows: runs them, drops repeated questions and drafts without an answer, counts drafts and
    (in ``progress``) rows."""

    def __init__(
        self,
        options: _Options,
        runner: ToolRunner,
        extra_turns: int,
        max_drafts: int,
        progress: Progress,
        hint_fraction: float = 0.0,
    ) -> None:
        self.options = options
        self.progress = progress
        self.hint_fraction = hint_fraction
        self.runner = runner
        self.extra_turns = extra_turns
        self.max_drafts = max_drafts
        self.drafts = 0
        self.questions: set[str] = set()
        self.offered = [tool for server in options.servers for tool in runner.tool_names(server)]
        self._universes: dict[str, Universe] = {}

    def universe(self, entities: str) -> Universe:
        """The `Universe` of an entity pool, one per pool (its data is loaded once)."""
        return self._universes.setdefault(entities, Universe(entities))

    def count_draft(self, made: str) -> None:
        """Count one draft; ``made`` says how far the splits are, for the error when the drafts run out."""
        self.drafts += 1
        if self.drafts > self.max_drafts:
            raise TaskGenerationError(
                f"only {made} distinct questions after {self.max_drafts} drafts for servers "
                f"{list(self.options.servers)} and complexities {list(self.options.complexities)}: ask for fewer "
                "questions or allow more servers/complexities"
            )

    def run(self, draft: Draft, template: Template) -> tuple[str, _Ran] | None:
        """``(task_id, ran)`` of a new question whose calls support an answer, else ``None``."""
        if draft.question in self.questions:
            return None
        self.questions.add(draft.question)
        ran = _run(draft, self.runner)
        return None if ran is None else (_task_id(draft, template, ran.steps), ran)

    def row(
        self, task_id: str, draft: Draft, template: Template, ran: _Ran, split: str, entity_split: str | None = None
    ) -> TaskRow:
        extra: dict[str, Any] = {"template": template.name, "generator": "rule_based"}
        if draft.entity is not None:
            extra.update(entity=draft.entity, entity_text=draft.entity_text)
        if entity_split is not None:
            extra["entity_split"] = entity_split
        label = f"{template.name}/seen" if entity_split == "seen" else template.name
        question = draft.question
        if split == "train" and draft.hint is not None and _share_of(task_id) < self.hint_fraction:
            question = f"{question} {draft.hint}"
            extra["hint"] = draft.hint
        self.progress.advance()
        return TaskRow(
            task_id=task_id,
            system_prompt=SYSTEM_PROMPT,
            user_prompt=question,
            tool_sequence=ran.steps,
            expected_answer=ran.answer,
            answer_match=draft.answer_match,
            tolerance=ran.tolerance,
            servers=list(self.options.servers),
            tools=self.offered,
            max_servers=len({step.server for step in ran.steps}),
            max_tools=len(ran.steps) + EXTRA_TOOL_BUDGET,
            max_turns=len(ran.steps) + 1 + self.extra_turns,
            split=split,
            data_source=f"{DATA_SOURCE_PREFIX}{ran.steps[0].server}/{label}",
            extra=extra,
        )


def _share_of(task_id: str) -> float:
    """A number in [0, 1) fixed by the task id: which questions get a hint, without drawing from the question rng."""
    return int(hashlib.sha1(task_id.encode("utf-8")).hexdigest()[:8], 16) / 16**8


def _by_hash(
    maker: _RowMaker,
    rng: random.Random,
    options: _Options,
    eligible: list[Template],
    train_size: int,
    val_size: int,
    balance_templates: bool,
) -> list[TaskRow]:
    """One stream of distinct questions, each in the split the hash of its task id gives."""
    val_ratio = val_size / (train_size + val_size)
    wanted = {"train": train_size, "validation": val_size}
    quotas = {split: _shares(size, [t.name for t in eligible]) for split, size in wanted.items()}
    rows: dict[str, list[TaskRow]] = {"train": [], "validation": []}
    made: dict[str, Counter] = {split: Counter() for split in rows}
    while any(len(rows[s]) < wanted[s] for s in rows):
        maker.count_draft(
            f"{len(rows['train'])}/{train_size} train and {len(rows['validation'])}/{val_size} validation"
        )
        if balance_templates:
            open_ = [t for t in eligible if any(made[s][t.name] < quotas[s][t.name] for s in rows)]
            template = rng.choice(open_)
        else:
            template = rng.choice(options.templates[rng.choice(options.complexities)])
        draft = template.make(rng, maker.universe("all"))
        made_row = maker.run(draft, template)
        if made_row is None:
            continue
        task_id, ran = made_row
        split = split_for(task_id, val_ratio)
        full = made[split][template.name] >= quotas[split][template.name] if balance_templates else False
        if full or len(rows[split]) >= wanted[split]:
            continue
        made[split][template.name] += 1
        rows[split].append(maker.row(task_id, draft, template, ran, split))
    return rows["train"] + rows["validation"]


def _by_entity(
    maker: _RowMaker,
    rng: random.Random,
    eligible: list[Template],
    train_size: int,
    val_size: int,
    seen_val_size: int,
) -> list[TaskRow]:
    """Training questions from the training entities, then the unseen and the seen held-out ones, each an equal
    share per template."""
    buckets = (("train", "train", "train", train_size), ("validation", "unseen", "held_out", val_size))
    buckets += (("validation", "seen", "train", seen_val_size),)
    rows: list[TaskRow] = []
    for split, entity_split, pool, size in buckets:
        quota = _shares(size, [t.name for t in eligible])
        made: Counter = Counter()
        universe = maker.universe(pool)
        while sum(made.values()) < size:
            maker.count_draft(f"{sum(made.values())}/{size} {entity_split}")
            template = rng.choice([t for t in eligible if made[t.name] < quota[t.name]])
            draft = template.make(rng, universe)
            made_row = maker.run(draft, template)
            if made_row is None:
                continue
            task_id, ran = made_row
            made[template.name] += 1
            rows.append(maker.row(task_id, draft, template, ran, split, entity_split))
    return rows


def _shares(size: int, names: Sequence[str]) -> dict[str, int]:
    """``size`` split evenly over ``names``, the first ones one more when it does not divide."""
    base, extra = divmod(size, len(names))
    return {name: base + (i < extra) for i, name in enumerate(names)}


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", required=True, help="folder for train/validation .parquet and .jsonl files")
    parser.add_argument("--train-size", type=int, required=True)
    parser.add_argument("--val-size", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--complexities", type=_csv, default=["single"], help=f"comma-separated: {','.join(COMPLEXITIES)}"
    )
    parser.add_argument("--servers", type=_csv, default=["market"], help="comma-separated: market,search,python,slack")
    parser.add_argument("--templates", type=_csv, default=None, help="comma-separated template names (default: all)")
    parser.add_argument(
        "--balance-templates", action="store_true", help="give every template an equal share of each split"
    )
    parser.add_argument(
        "--extra-turns",
        type=int,
        default=EXTRA_TURNS,
        help=f"turns per question beyond one per tool call and one to answer (default {EXTRA_TURNS})",
    )
    parser.add_argument(
        "--held-out-entities",
        action="store_true",
        help="split by entity: held-out questions name companies and months no training question names "
        "(templates that hold entities out only)",
    )
    parser.add_argument(
        "--seen-val-size",
        type=int,
        default=0,
        help="with --held-out-entities: this many more held-out questions about training entities (the 'seen' split)",
    )
    parser.add_argument(
        "--hint-fraction",
        type=float,
        default=0.0,
        help="share of the training questions that end with their template's hint naming the tools and the field "
        "(held-out questions never do); default 0",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace existing output files")
    parser.add_argument("--no-jsonl", action="store_true", help="write only the .parquet files")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the progress lines, without a terminal
    tasks = generate_tasks(
        args.train_size,
        args.val_size,
        seed=args.seed,
        complexities=args.complexities,
        servers=args.servers,
        templates=args.templates,
        balance_templates=args.balance_templates,
        extra_turns=args.extra_turns,
        held_out_entities=args.held_out_entities,
        seen_val_size=args.seen_val_size,
        hint_fraction=args.hint_fraction,
    )
    paths = write_dataset(
        tasks,
        args.output_dir,
        val_ratio=None if args.held_out_entities else args.val_size / (args.train_size + args.val_size),
        overwrite=args.overwrite,
        formats=("parquet",) if args.no_jsonl else ("parquet", "jsonl"),
    )
    for path in paths.values():
        print(f"wrote {path}")
    return paths


if __name__ == "__main__":
    main()
