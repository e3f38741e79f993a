"""The benchmark's task, shared by both trainers: single-turn JSON tool calls, two few-shot demonstrations.

Each prompt is a chat: a system prompt listing three tools, two worked demonstrations (a question, then the call as
one JSON object), then the question. The reply is scored by `reward` (graded, so a 135M model gets signal from the
start): 0.2 for a JSON object with ``name`` and ``arguments``, 0.3 more for the right tool, and up to 0.5 more for
the share of expected arguments given with the right value. Pure Python, no project import: the TRL side runs in its
own venv and reads it too.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

SYSTEM_PROMPT = (
    "You call tools. Tools: get_stock_price(ticker, date): closing price of a stock on a date; "
    "get_weather(city, date): the weather in a city on a date; convert_currency(amount, source, target): convert "
    'money. Reply with one JSON object only: {"name": "<tool>", "arguments": {...}}'
)

DEMONSTRATIONS = [
    {"role": "user", "content": "What was the closing price of MSFT on 2024-05-06?"},
    {
        "role": "assistant",
        "content": '{"name": "get_stock_price", "arguments": {"ticker": "MSFT", "date": "2024-05-06"}}',
    },
    {"role": "user", "content": "How much is 250 EUR in JPY?"},
    {
        "role": "assistant",
        "content": '{"name": "convert_currency", "arguments": {"amount": 250, "source": "EUR", "target": "JPY"}}',
    },
]

_TICKERS = ["AAPL", "NVDA", "AMZN", "GOOG", "TSLA", "META", "NFLX", "ORCL", "INTC", "AMD"]
_CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Denver", "Madrid", "Seoul", "Nairobi", "Perth"]
_CURRENCIES = ["USD", "EUR", "GBP", "CHF", "CAD", "AUD", "INR", "BRL"]


def _question(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """One question and its expected call."""
    kind = rng.randrange(3)
    date = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if kind == 0:
        ticker = rng.choice(_TICKERS)
        return f"What was the closing price of {ticker} on {date}?", {
            "name": "get_stock_price",
            "arguments": {"ticker": ticker, "date": date},
        }
    if kind == 1:
        city = rng.choice(_CITIES)
        return f"What is the weather in {city} on {date}?", {
            "name": "get_weather",
            "arguments": {"city": city, "date": date},
        }
    source, target = rng.sample(_CURRENCIES, 2)
    amount = rng.choice([10, 40, 75, 120, 300, 999])
    return f"How much is {amount} {source} in {target}?", {
        "name": "convert_currency",
        "arguments": {"amount": amount, "source": source, "target": target},
    }


def make_rows(count: int, seed: int) -> list[dict[str, Any]]:
    """`count` tasks: ``{"prompt": chat messages, "expected": the expected call as a JSON string}``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        question, expected = _question(rng)
        prompt = [{"role": "system", "content": SYSTEM_PROMPT}, *DEMONSTRATIONS, {"role": "user", "content": question}]
        rows.append({"prompt": prompt, "expected": json.dumps(expected)})
    return rows


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def reward(completion: str, expected: str) -> float:
    """Graded score of one reply against the expected call (module docstring)."""
    match = _OBJECT.search(completion)
    if match is None:
        return 0.0
    try:
        call = json.loads(match.group(0))
    except json.JSONDecodeError:
        return 0.0
    if not isinstance(call, dict) or not isinstance(call.get("arguments"), dict) or "name" not in call:
        return 0.0
    want = json.loads(expected)
    score = 0.2
    if call["name"] != want["name"]:
        return score
    score += 0.3
    arguments = call["arguments"]
    right = sum(str(arguments.get(key)) == str(value) for key, value in want["arguments"].items())
    return score + 0.5 * right / len(want["arguments"])
