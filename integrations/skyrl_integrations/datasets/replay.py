"""Run a question's tool calls on real MCP servers and check that its expected answer comes out of the results.

Used by the LLM-based generator (every generated question is executed before it is kept), the dependent-spec converter
(tool → server resolution from the servers' ``tools/list``) and ``validate --execute``.

- ``ToolServers``: one ``MCPToolGroup`` per server name, opened on first use, closed by ``close()`` / ``with``.
- ``answer_from_result(text, field)``: the scalar answer a tool result holds (the whole result when it is a scalar
  or short text, else the value at a dotted ``field`` path of its JSON).
- ``answer_in_results(expected, answer_match, texts)``: whether the answer is a value of the results (or, for a
  number, the sum or difference of two of their numbers).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from skyrl_integrations.datasets.schema import ToolStep
from skyrl_integrations.mcp.client import MCPToolGroup, ToolResult
from skyrl_integrations.mcp.spec import MCPServerSpec

__all__ = [
    "MAX_ANSWER_CHARS",
    "ToolServers",
    "answer_from_result",
    "answer_in_results",
    "format_answer",
    "scalar_fields",
]

MAX_ANSWER_CHARS = 80
"""Longest expected answer taken from a result: anything longer is prose (a snippet, a page), not a value."""


class ToolServers:
    """Named MCP servers, each one real process (or URL) reached through ``MCPToolGroup``.

    ``specs`` maps a server name to its ``MCPServerSpec`` (or anything ``MCPServerSpec.from_config`` accepts: a
    bundled server name, a ``{command, args, env, url}`` dict). ``ToolServers.bundled(["market"])`` is the usual
    form.
    """

    def __init__(self, specs: Mapping[str, Any], *, call_timeout_s: float = 30.0):
        self.specs = {
            name: spec if isinstance(spec, MCPServerSpec) else MCPServerSpec.from_config(name, spec)
            for name, spec in specs.items()
        }
        self.call_timeout_s = call_timeout_s
        self._groups: dict[str, MCPToolGroup] = {}
        self._tools: dict[str, list[dict[str, Any]]] = {}

    @classmethod
    def bundled(cls, names: Iterable[str], **kwargs: Any) -> ToolServers:
        return cls({name: MCPServerSpec.bundled(name) for name in names}, **kwargs)

    @property
    def names(self) -> list[str]:
        return list(self.specs)

    def group(self, server: str) -> MCPToolGroup:
        if server not in self.specs:
            raise KeyError(f"unknown server {server!r}; configured servers: {', '.join(self.specs)}")
        if server not in self._groups:
            # No truncation: the full result is what the expected answer is checked against.
            self._groups[server] = MCPToolGroup(
                self.specs[server], call_timeout_s=self.call_timeout_s, max_output_chars=1_000_000
            )
        return self._groups[server]

    def list_tools(self, server: str) -> list[dict[str, Any]]:
        """The server's tool schemas (MCP form), fetched once."""
        if server not in self._tools:
            self._tools[server] = self.group(server).list_tools()
        return self._tools[server]

    def tool_servers(self, servers: Iterable[str] | None = None) -> dict[str, str]:
        """Tool name → server name over ``servers`` (default all); a tool offered by two servers is an error."""
        owner: dict[str, str] = {}
        for server in self.names if servers is None else servers:
            for schema in self.list_tools(server):
                name = schema["name"]
                if name in owner:
                    raise ValueError(
                        f"tool {name!r} is offered by both {owner[name]!r} and {server!r}; pass an explicit "
                        "tool -> server map"
                    )
                owner[name] = server
        return owner

    def missing_arguments(self, step: ToolStep) -> list[str]:
        """Required arguments of the step's tool (per its ``inputSchema``) that ``step.params`` leaves out; a row
        may omit free-text arguments (a query, a program) that any wording of satisfies."""
        schema = next((t for t in self.list_tools(step.server) if t["name"] == step.tool), None)
        required = ((schema or {}).get("inputSchema") or {}).get("required") or []
        return [name for name in required if name not in step.params]

    def run(self, steps: Sequence[ToolStep]) -> list[ToolResult]:
        """Call the steps in order; stops after the first failed call (its result is the last one returned)."""
        results = []
        for step in steps:
            result = self.group(step.server).call_tool(step.tool, dict(step.params))
            results.append(result)
            if result.is_error:
                break
        return results

    def close(self) -> None:
        groups, self._groups = self._groups, {}
        for group in groups.values():
            group.close()

    def __enter__(self) -> ToolServers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def format_answer(value: Any) -> str | None:
    """A JSON scalar as answer text (``187.23``, ``42``, ``AAPL``, ``true``); ``None`` for null, lists, objects."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and math.isfinite(value):
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def answer_from_result(text: str, field: str | None = None) -> str | None:
    """The answer ``text`` (a tool result) holds: the value at dotted path ``field`` (``"close"``,
    ``"results.0.title"``) of its JSON, else the result itself when it is a JSON scalar or plain text. ``None``
    when there is no such scalar (a missing field, an object without a field) or it is longer than
    ``MAX_ANSWER_CHARS``."""
    try:
        data = json.loads(text)
    except ValueError:
        plain = text.strip()
        return plain if field is None and 0 < len(plain) <= MAX_ANSWER_CHARS else None
    if field:
        for part in field.split("."):
            if isinstance(data, Mapping) and part in data:
                data = data[part]
            elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
                data = data[int(part)]
            else:
                return None
    answer = format_answer(data)
    return answer if answer is not None and len(answer) <= MAX_ANSWER_CHARS else None


def scalar_fields(text: str) -> dict[str, str]:
    """Field path -> answer text for the scalars of a JSON object result: its top-level fields and the fields of
    the first object of each top-level list (``results.0.url``). Empty for other results."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, Mapping):
        return {}
    found: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, list) and value and isinstance(value[0], Mapping):
            items = [(f"{key}.0.{k}", v) for k, v in value[0].items()]
        else:
            items = [(str(key), value)]
        for path, item in items:
            answer = format_answer(item)
            if answer is not None and len(answer) <= MAX_ANSWER_CHARS:
                found[path] = answer
    return found


def answer_in_results(expected: str, answer_match: str, texts: Iterable[str]) -> bool:
    """Whether ``expected`` is derivable from the results ``texts``:

    - ``numeric``: a number of some result, or the sum or difference of two of them, equals the answer at the
      answer's precision (``"169.9"`` matches within 0.05; integers and exact values within 1e-6 relative);
    - ``exact``: some scalar of a result equals it, ignoring case and surrounding space;
    - ``contains``: it is a substring of some result, ignoring case.
    """
    texts = list(texts)
    leaves = [leaf for text in texts for leaf in _scalar_leaves(text)]
    if answer_match == "numeric":
        target = _number(expected)
        if target is None:
            return False
        tolerance = _tolerance(expected, target)
        numbers = list(dict.fromkeys(n for n in map(_number, leaves) if n is not None))
        candidates = numbers + [a + b for a, b in itertools.combinations(numbers, 2)]
        candidates += [a - b for a, b in itertools.permutations(numbers, 2)]
        return any(abs(value - target) <= tolerance for value in candidates)
    wanted = expected.strip().lower()
    if answer_match == "exact":
        return any(leaf.strip().lower() == wanted for leaf in leaves)
    return any(wanted in text.lower() for text in texts) or any(wanted in leaf.lower() for leaf in leaves)


def _tolerance(text: str, value: float) -> float:
    """Half a unit of the last decimal written (``"169.9"`` -> 0.05), at least 1e-6 relative."""
    relative = 1e-6 * max(1.0, abs(value))
    digits = text.strip().partition(".")[2]
    if not digits.isdigit():
        return relative
    return max(relative, 0.5 * 10 ** -len(digits))


def _scalar_leaves(text: str) -> list[str]:
    try:
        data = json.loads(text)
    except ValueError:
        return [text]
    leaves: list[str] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            answer = format_answer(item)
            if answer is not None:
                leaves.append(answer)
    return leaves


def _number(text: str) -> float | None:
    try:
        value = float(text.strip().replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None
