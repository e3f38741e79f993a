"""Worked example questions and argument values for the bundled servers, used by ``llm_based`` to prompt a model.

``SEED_TASKS`` are shown to the model as demonstrations (a request, then the question JSON it should answer with);
``HINT_VALUES`` (plus every argument value of the seeds) are the values the generator offers the model for a
tool's arguments. All of them hold for the bundled servers' offline data (a test replays every seed); with other
servers (or live mode) the generator still works, since every generated question is checked by execution.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["HINT_VALUES", "SEED_TASKS", "SeedTask", "hint_pool"]


@dataclass(frozen=True)
class SeedTask:
    """A known-good question: its text, its calls ``(tool, arguments)`` in order, and the answer's field path in the
    last call's result."""

    question: str
    calls: tuple[tuple[str, dict[str, Any]], ...]
    answer_field: str

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(tool for tool, _ in self.calls)

    def as_reply(self) -> dict[str, Any]:
        """The JSON object the model is asked to write."""
        return {
            "question": self.question,
            "calls": [{"tool": tool, "arguments": arguments} for tool, arguments in self.calls],
            "answer_field": self.answer_field,
        }


def _seed(question: str, answer_field: str, *calls: tuple[str, dict[str, Any]]) -> SeedTask:
    return SeedTask(question, tuple(calls), answer_field)


SEED_TASKS: tuple[SeedTask, ...] = (
    _seed(
        "What was the closing price of AAPL on 2024-03-15?",
        "close",
        ("get_stock_price", {"ticker": "AAPL", "date": "2024-03-15"}),
    ),
    _seed("How many employees does KO have?", "employees", ("get_company_profile", {"ticker": "KO"})),
    _seed("What was the EPS of NVDA in 2024-Q2?", "eps", ("get_financials", {"ticker": "NVDA", "period": "2024-Q2"})),
    _seed(
        "What was the closing price of BTC on 2024-05-01?",
        "close",
        ("get_crypto_price", {"symbol": "BTC", "date": "2024-05-01"}),
    ),
    _seed(
        "Find the ticker of Saraven Foods, then tell me which sector the company is in.",
        "sector",
        ("search_tickers", {"query": "Saraven Foods"}),
        ("get_company_profile", {"ticker": "SRVN"}),
    ),
    _seed(
        "What is the URL of the Helix Robotics investor relations page?",
        "results.0.url",
        ("web_search", {"query": "Helix Robotics investor relations", "max_results": 1}),
    ),
    _seed(
        "Search the web for the Helix Robotics headquarters, then open the first result and give its page title.",
        "title",
        ("web_search", {"query": "Helix Robotics headquarters", "max_results": 1}),
        ("fetch_page", {"url": "https://helix-robotics.example/investors"}),
    ),
    _seed("What is the job title of the Slack user bob?", "title", ("get_user", {"user": "bob"})),
    _seed(
        "Which user id posted the newest message in the general channel?",
        "messages.0.user",
        ("read_channel", {"channel": "general", "limit": 1}),
    ),
    _seed("Use Python to compute 17 * 23.", "stdout", ("run_python", {"code": "print(17 * 23)"})),
    _seed(
        "Search the web for the maker of the Strider warehouse robot, then look up how many employees it has.",
        "employees",
        ("web_search", {"query": "Strider warehouse robot", "max_results": 1}),
        ("get_company_profile", {"ticker": "HLXR"}),
    ),
)

HINT_VALUES: dict[str, tuple[Any, ...]] = {
    "ticker": ("MSFT", "JPM", "TSLA", "WMT", "HLXR"),
    "date": ("2024-01-10", "2024-02-07", "2024-06-03", "2024-09-17", "2024-11-12"),
    "period": ("2023-Q4", "2024-Q1", "FY2023"),
    "symbol": ("ETH",),
    "user": ("alice", "dave"),
    "channel": ("deploys", "engineering"),
    "code": ("print(2 ** 10)", "print(sum(range(1, 101)))"),
}


def hint_pool(seeds: Iterable[SeedTask] = SEED_TASKS) -> dict[str, list[Any]]:
    """Argument name -> candidate values: ``HINT_VALUES`` plus every value the seeds pass, without repeats."""
    pool: dict[str, list[Any]] = {name: list(values) for name, values in HINT_VALUES.items()}
    for seed in seeds:
        for _, arguments in seed.calls:
            for name, value in arguments.items():
                values = pool.setdefault(name, [])
                if value not in values:
                    values.append(value)
    return pool
