"""Recognise decoded JSON that describes tool calls, in the shapes models and APIs use.

- `{"name": ..., "arguments": {...}}` and the synonyms `tool` / `tool_name` / `function` for the name and
  `params` / `parameters` / `args` / `input` for the arguments;
- an OpenAI tool-call item `{"type": "function", "function": {"name": ..., "arguments": "<json string>"}}`;
- an OpenAI message `{"tool_calls": [item, ...]}` or a legacy `{"function_call": {...}}`;
- a list of any of the above.
"""

from __future__ import annotations

import re
from typing import Any

from skyrl_integrations.tool_parser.schema import ToolRegistry

NAME_KEYS = ("name", "tool", "tool_name", "function")
ARGUMENT_KEYS = ("arguments", "params", "parameters", "args", "input", "tool_input")
# Keys that may sit next to the name in a call that has no arguments, e.g. {"id": "call_1", "name": "list_tools"}.
_BOOKKEEPING_KEYS = frozenset({"id", "type", "call_id", "index"})

# A key that only call-shaped JSON has; text without one holds no JSON call attempt (a cheap pre-filter).
CALL_KEY = re.compile(r"[\"'](?:name|tool|tool_name|function|tool_calls|function_call)[\"']\s*:")

FORMAT_JSON = "json"
FORMAT_OPENAI = "openai_tool_calls"

RawCall = tuple[Any, Any]
"""(name, arguments) exactly as found; `validate.check_call` decides whether they are usable."""


def _call_from_dict(obj: dict[str, Any], name_only: bool) -> RawCall | None:
    function = obj.get("function")
    if isinstance(function, dict):
        return _call_from_dict(function, name_only=True)
    name_key = next((key for key in NAME_KEYS if key in obj), None)
    if name_key is None:
        return None
    args_key = next((key for key in ARGUMENT_KEYS if key in obj), None)
    if args_key is None:
        if not name_only or not set(obj) - {name_key} <= _BOOKKEEPING_KEYS:
            return None  # e.g. {"name": "Apple Inc.", "ticker": "AAPL"}: data, not a call
        return obj[name_key], None
    return obj[name_key], obj[args_key]


def calls_from_json(value: Any, *, name_only: bool = True) -> tuple[str, list[RawCall]] | None:
    """Return `(format, calls)` when `value` describes one or more tool calls, None when it is plain data.

    `name_only=False` requires an arguments key on a bare object: in running text `{"name": "John"}` is data,
    while inside a `<tool_call>` tag it is a call without arguments. OpenAI wrappers are always explicit. A
    `tool_calls` item that is not call-shaped comes back as `(None, None)` so it is reported, not dropped.
    """
    if isinstance(value, dict):
        tool_calls = value.get("tool_calls")
        if isinstance(tool_calls, list) and tool_calls:
            return FORMAT_OPENAI, [
                (_call_from_dict(item, name_only=True) if isinstance(item, dict) else None) or (None, None)
                for item in tool_calls
            ]
        legacy = value.get("function_call")
        if isinstance(legacy, dict):
            call = _call_from_dict(legacy, name_only=True)
            return (FORMAT_OPENAI, [call]) if call is not None else None
        call = _call_from_dict(value, name_only)
        return (FORMAT_JSON, [call]) if call is not None else None
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        calls = [_call_from_dict(item, name_only) for item in value]
        if all(call is not None for call in calls):
            return FORMAT_JSON, calls  # type: ignore[return-value]
    return None


def calls_from_prose_json(value: Any, registry: ToolRegistry | None) -> tuple[str, list[RawCall]] | None:
    """`calls_from_json` for JSON outside a tool-call tag, where a name-only object counts only for a known tool."""
    shaped = calls_from_json(value, name_only=False)
    if shaped is None and registry is not None:
        loose = calls_from_json(value)
        if loose is not None and all(isinstance(name, str) and registry.resolve(name) for name, _ in loose[1]):
            return loose
    return shaped
