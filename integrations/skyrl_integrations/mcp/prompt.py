"""The MCP env's prompt: the dataset's system message, then the tools, then how to call them and how to finish.

Two renderings of the tools (`tool_prompt`):

- ``"full"``: each tool's JSON schema on one line inside ``<tools>...</tools>`` (what tool-tuned chat models expect);
- ``"compact"``: one short line per tool, ``- get_stock_price(ticker: string, date?: string): Closing price...``
  (``?`` marks an optional argument), for models with a small context such as the default 135M CPU model.

Optional demonstrations (worked examples as chat messages) go between the system message and the task.

The call format is said in words (`CALL_IN_WORDS`), not shown as a template: the default 135M model copied the
template's placeholders (``{"name": "<tool name>", "arguments": {<arguments as JSON>}}``) verbatim into its calls
(docs/results.md, "What the untrained model does"). Worked calls belong in the demonstrations, on tools the tasks do not
use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

TOOL_PROMPT_STYLES = ("full", "compact")
DEFAULT_ROLE = "You are a helpful assistant. Use the tools below to complete the user's task."
COMPACT_DESCRIPTION_CHARS = 120
"""Compact style: tool descriptions are cut to their first line, at most this many characters."""
CALL_IN_WORDS = (
    'To call a tool, write one JSON object between <tool_call> and </tool_call>, with the key "name" (one of the '
    'tools above) and the key "arguments" (an object of its arguments)'
)
"""How to call a tool, as a sentence without its final stop: the system prompt's call format and the env's reminder
after an unusable call (`env.FORMAT_REMINDER`) both say it."""


def call_format(max_calls_per_turn: int) -> str:
    """How to call a tool and how to give the final answer."""
    several = (
        f"You may make up to {max_calls_per_turn} calls in one reply, one <tool_call> block each. "
        if max_calls_per_turn > 1
        else "Make one call per reply. "
    )
    return (
        f"{CALL_IN_WORDS}.\n"
        f"{several}The results come back in the next message.\n"
        "When you know the answer, reply without a tool call: that reply is your final answer."
    )


def call_text(name: str, arguments: Mapping[str, Any]) -> str:
    """A call as a reply writes it: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': dict(arguments)}, ensure_ascii=False)}</tool_call>"


def render_tools(tools: Sequence[Mapping[str, Any]], style: str = "full") -> str:
    """The tools section in `style` ("full" or "compact"); `tools` are MCP-form schemas."""
    if style == "full":
        lines = [
            json.dumps(
                {"name": t["name"], "description": t.get("description", ""), "parameters": _schema(t)},
                ensure_ascii=False,
            )
            for t in tools
        ]
        return "You can call these tools:\n<tools>\n" + "\n".join(lines) + "\n</tools>"
    if style == "compact":
        return "You can call these tools:\n" + "\n".join(_compact_line(t) for t in tools)
    raise ValueError(f"tool_prompt: expected one of {TOOL_PROMPT_STYLES}, got {style!r}")


def build_prompt(
    prompt: Sequence[Mapping[str, str]],
    tools: Sequence[Mapping[str, Any]],
    *,
    style: str = "full",
    max_calls_per_turn: int = 1,
    demonstrations: Sequence[Mapping[str, str]] = (),
) -> list[dict[str, str]]:
    """The episode's opening chat: one system message (the dataset's own system text, or `DEFAULT_ROLE`, then the
    tools and the call format), the demonstrations, then the rest of the dataset prompt."""
    messages = [dict(m) for m in prompt]
    head = messages.pop(0)["content"] if messages and messages[0].get("role") == "system" else DEFAULT_ROLE
    system = "\n\n".join([head, render_tools(tools, style), call_format(max_calls_per_turn)])
    return [{"role": "system", "content": system}, *(dict(m) for m in demonstrations), *messages]


def validate_demonstrations(value: Any, where: str = "demonstrations") -> list[dict[str, str]]:
    """Demonstrations as a list of ``{"role": "user" | "assistant", "content": str}``; errors name the item."""
    if value is None:
        return []
    if isinstance(value, str | Mapping) or not isinstance(value, Sequence):
        raise ValueError(f"{where}: expected a list of chat messages, got {type(value).__name__}")
    out = []
    for i, message in enumerate(value):
        if not isinstance(message, Mapping) or set(message) != {"role", "content"}:
            raise ValueError(f"{where}[{i}]: expected {{'role': ..., 'content': ...}}, got {message!r}")
        if message["role"] not in ("user", "assistant") or not isinstance(message["content"], str):
            raise ValueError(f"{where}[{i}]: role must be 'user' or 'assistant' and content a string")
        out.append({"role": message["role"], "content": message["content"]})
    return out


def _schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    return dict(tool.get("inputSchema") or {"type": "object", "properties": {}})


def _compact_line(tool: Mapping[str, Any]) -> str:
    schema = _schema(tool)
    required = set(schema.get("required") or [])
    args = ", ".join(
        f"{name}{'' if name in required else '?'}: {_type_name(prop)}"
        for name, prop in (schema.get("properties") or {}).items()
    )
    description = (tool.get("description") or "").strip().split("\n")[0][:COMPACT_DESCRIPTION_CHARS]
    return f"- {tool['name']}({args})" + (f": {description}" if description else "")


def _type_name(prop: Any) -> str:
    if not isinstance(prop, Mapping):
        return "any"
    kind = prop.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if kind:
        return f"array[{_type_name(prop.get('items'))}]" if kind == "array" and prop.get("items") else str(kind)
    alternatives = prop.get("anyOf") or prop.get("oneOf")
    if alternatives:
        return "|".join(_type_name(a) for a in alternatives)
    return "any"
