"""Throughput of `parse_tool_calls` over a realistic mixed corpus of model messages.

    .venv/bin/python benchmarks/tool_parser_throughput.py [--messages 20000] [--no-tools]

The corpus mixes plain answers (about half of real multi-turn traffic), every supported call format, several calls
per message, and malformed variants, with MCP-form tool schemas like the bundled market/search/python servers'.
Prints messages/second overall and per format.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter, defaultdict

from skyrl_integrations.tool_parser import ToolRegistry, parse_tool_calls

TOOLS = [
    {
        "name": "get_stock_price",
        "description": "Closing price of a stock on a date.",
        "inputSchema": {
            "type": "object",
            "properties": {"ticker": {"type": "string"}, "date": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "required": ["ticker"],
        },
    },
    {
        "name": "get_company_profile",
        "description": "Company profile.",
        "inputSchema": {"type": "object", "properties": {"ticker": {"type": "string"}}, "required": ["ticker"]},
    },
    {
        "name": "web_search",
        "description": "Search the web.",
        "inputSchema": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "max_results": {"type": "integer"}},
            "required": ["query"],
        },
    },
    {
        "name": "execute_python",
        "description": "Run Python code.",
        "inputSchema": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
    {
        "type": "function",
        "function": {
            "name": "send_message",
            "description": "Post to a Slack channel.",
            "parameters": {
                "type": "object",
                "properties": {"channel": {"type": "string"}, "text": {"type": "string"}},
                "required": ["channel", "text"],
            },
        },
    },
]

_PROSE = [
    "The closing price of AAPL on 2024-03-15 was $172.62, down 0.2% from the previous session.",
    "I could not find a company with that ticker. Could you double-check the symbol (for example MSFT or GOOG)?",
    "Based on the search results, the Federal Reserve kept rates unchanged at its March meeting; "
    "markets had priced this in. In summary: no change, with three cuts still projected for the year.",
    "Sure! Here's how you'd compute it in Python:\n\n```python\ndef mean(xs):\n    return sum(xs) / len(xs)\n```\n"
    "The mean of your numbers is 4.5.",
    "Let me think about this step by step. First, revenue grew 12% year over year (see the 10-K, p. 34). "
    "Second, margins improved. So the answer is yes.",
    "Final answer: 187.23",
]
_CALLS = [
    ("get_stock_price", {"ticker": "AAPL", "date": "2024-03-15"}),
    ("get_company_profile", {"ticker": "NVDA"}),
    ("web_search", {"query": "fed rate decision march 2024", "max_results": 5}),
    ("execute_python", {"code": "import statistics\nprint(statistics.mean([1, 2, 3, 4]))"}),
    ("send_message", {"channel": "#general", "text": "Deploy finished"}),
]


def _thought() -> str:
    return random.choice(["", "I'll look that up.\n", "Let me check the data first.\n\n"])


def _py_kwargs(arguments: dict) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in arguments.items())


def _render(fmt: str, name: str, arguments: dict) -> str:
    payload = json.dumps({"name": name, "arguments": arguments})
    renderers = {
        "tool_call_tag": lambda: f"{_thought()}<tool_call>\n{payload}\n</tool_call>",
        "tool_call_unclosed": lambda: f"{_thought()}<tool_call>\n{payload}\n",
        "function_call_tag": lambda: f"<function_call>{payload}</function_call>",
        "openai_tool_calls": lambda: json.dumps(
            {
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
                ]
            }
        ),
        "json": lambda: f"{_thought()}{payload}",
        "fenced_json": lambda: f"{_thought()}```json\n{payload}\n```",
        "xml": lambda: f'<tool name="{name}">'
        + "".join(f"<{key}>{value}</{key}>" for key, value in arguments.items())
        + "</tool>",
        "react": lambda: f"Thought: I need data.\nAction: {name}\nAction Input: {json.dumps(arguments)}",
        "code_call": lambda: f"```python\n{name}({_py_kwargs(arguments)})\n```",
        "multi": lambda: "\n".join(
            f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in _CALLS[:3]
        ),
        "malformed": lambda: f'<tool_call>{{"name": "{name}", "arguments": {{"ticker": AAPL}}}}</tool_call>',
        "repairable": lambda: f"<tool_call>{{'name': {name!r}, 'arguments': {arguments!r},}}</tool_call>",
    }
    return renderers[fmt]()


_MIX = {
    "prose": 40,
    "tool_call_tag": 15,
    "tool_call_unclosed": 5,
    "function_call_tag": 3,
    "openai_tool_calls": 5,
    "json": 5,
    "fenced_json": 5,
    "xml": 4,
    "react": 5,
    "code_call": 5,
    "multi": 3,
    "malformed": 3,
    "repairable": 2,
}


def build_corpus(size: int, seed: int = 0) -> list[tuple[str, str]]:
    random.seed(seed)
    kinds = random.choices(list(_MIX), weights=list(_MIX.values()), k=size)
    corpus = []
    for kind in kinds:
        if kind == "prose":
            corpus.append((kind, random.choice(_PROSE)))
        else:
            corpus.append((kind, _render(kind, *random.choice(_CALLS))))
    return corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--no-tools", action="store_true", help="parse without tool schemas (no validation)")
    args = parser.parse_args()
    corpus = build_corpus(args.messages)
    tools = None if args.no_tools else ToolRegistry.from_tools(TOOLS)
    per_kind: dict[str, float] = defaultdict(float)
    outcomes: Counter[str] = Counter()
    started = time.perf_counter()
    for kind, message in corpus:
        t0 = time.perf_counter()
        result = parse_tool_calls(message, tools)
        per_kind[kind] += time.perf_counter() - t0
        outcomes[result.failure.value if result.failure else result.action] += 1
    elapsed = time.perf_counter() - started
    counts = Counter(kind for kind, _ in corpus)
    print(
        f"{len(corpus)} messages in {elapsed:.2f} s: {len(corpus) / elapsed:,.0f} messages/s (tools: {not args.no_tools})"
    )
    for kind in sorted(per_kind, key=per_kind.get, reverse=True):
        print(f"  {kind:20s} {counts[kind] / per_kind[kind]:>10,.0f} msgs/s  ({counts[kind]} messages)")
    print("outcomes:", dict(outcomes))


if __name__ == "__main__":
    main()
