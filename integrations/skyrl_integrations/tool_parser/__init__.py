"""One parser for every tool-call format models emit.

    from skyrl_integrations.tool_parser import parse_tool_calls

    result = parse_tool_calls(message, tools)     # tools: MCP or OpenAI tool schemas, optional
    if result.calls: ...                           # ToolCall(name, arguments, raw), in message order
    elif result.ok: ...                            # a plain reply: action "respond", failure NO_CALL
    else: hint = result.error                      # MALFORMED / UNKNOWN_TOOL / INVALID_ARGUMENTS

Formats: `<tool_call>` / `<function_call>` tags (closed or not), ``` JSON fences, OpenAI `{"tool_calls": [...]}`,
bare JSON objects (`name`/`tool`/`function` + `arguments`/`params`), XML `<tool name=...>` / `<tool><name>` /
`<invoke>` / `<function=...>` blocks, ReAct `Action:` / `Action Input:`, and code-call syntax `get_price(ticker="AAPL")`.
"""

from skyrl_integrations.tool_parser.arguments import ARGUMENT_ALIASES
from skyrl_integrations.tool_parser.parser import parse_tool_calls
from skyrl_integrations.tool_parser.result import ParseFailure, ParseResult, ToolCall
from skyrl_integrations.tool_parser.schema import ToolRegistry, ToolSpec

__all__ = [
    "ARGUMENT_ALIASES",
    "ParseFailure",
    "ParseResult",
    "ToolCall",
    "ToolRegistry",
    "ToolSpec",
    "parse_tool_calls",
]
