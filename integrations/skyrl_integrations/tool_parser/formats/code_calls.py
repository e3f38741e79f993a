"""Code-call syntax: `get_price(ticker="AAPL", date="2024-03-15")`, as in ```python / ```tool_code blocks.

Arguments are read with `ast` as literals only (never evaluated); JSON's `true/false/null` are accepted too.
`print(get_price(...))` and namespaced `default_api.get_price(...)` (Gemini's tool_code style) are unwrapped.

When a call counts (so prose like "call me (maybe)" or `main()` in a code sample does not):
- with tools: the name is a known tool, and the call either has arguments or stands alone on its line;
- without tools: the call stands alone on its line (e.g. inside a code block) and has keyword arguments.
Positional arguments are mapped to the tool's schema properties in order, so they need a known tool.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from skyrl_integrations.tool_parser.attempt import CallAttempt, failed_attempt
from skyrl_integrations.tool_parser.call_shapes import RawCall
from skyrl_integrations.tool_parser.schema import ToolRegistry

FORMAT = "code_call"

_DOTTED_NAME = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_CALL_ANYWHERE = re.compile(rf"(?<![\w.])({_DOTTED_NAME})\(")
_CALL_AT_LINE_START = re.compile(rf"^[ \t]*({_DOTTED_NAME})\(", re.M)
_LINE_REST = re.compile(r"[ \t;]*(?:\n|$)")
# Strings (incl. triple-quoted), comments and brackets: enough to find a call's closing parenthesis.
_PY_TOKEN = re.compile(
    r'"""[\s\S]*?(?:"""|\Z)|\'\'\'[\s\S]*?(?:\'\'\'|\Z)'
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\\\n]*(?:\\.[^\'\\\n]*)*\'|#[^\n]*|[()\[\]{}]'
)
_JSON_NAMES = {"true": True, "false": False, "null": None}
_MAX_CALL_CHARS = 100_000
_SCAN_BUDGET_FACTOR = 4
_LINE_LOOKBACK = 200
_PRINT_WRAP = "print("


class CodeCallError(ValueError):
    """The text is meant as a call but cannot be read as one (the message says why)."""


class NotACall(ValueError):
    """The text is not a call this parser reads (e.g. positional arguments with no schema to name them)."""


def call_end(text: str, open_paren: int, stop: int) -> int | None:
    """Position just past the parenthesis closing the one at `open_paren`, or None if it does not close by `stop`."""
    depth = 0
    for match in _PY_TOKEN.finditer(text, open_paren, stop):
        first = match.group()[0]
        if first in "([{":
            depth += 1
        elif first in ")]}":
            depth -= 1
            if depth == 0:
                return match.end()
    return None


def _literal(node: ast.AST) -> Any:
    """A JSON-compatible value from a literal expression node; raises ValueError otherwise."""
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(element) for element in node.elts]
    if isinstance(node, ast.Dict):
        result = {}
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            key = None if key_node is None else _literal(key_node)
            if not isinstance(key, str):
                raise ValueError("dict keys must be strings")
            result[key] = _literal(value_node)
        return result
    value = ast.literal_eval(node)
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise ValueError(f"{type(value).__name__} is not a JSON value")
    return value


def _unwrap(node: ast.AST) -> ast.AST:
    """`print(f(...))` -> `f(...)`."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Call)
    ):
        return node.args[0]
    return node


def _function_name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr  # default_api.get_price -> get_price
    return None


def read_call(source: str, registry: ToolRegistry | None) -> RawCall:
    """Read `source` (one call expression) into `(name, arguments)`; raises CodeCallError or NotACall."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise CodeCallError(f"invalid call syntax: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise CodeCallError(f"invalid call syntax: {type(exc).__name__}") from None
    call = _unwrap(tree.body)
    name = _function_name(call.func) if isinstance(call, ast.Call) else None
    if name is None:
        raise CodeCallError('expected a single function call like get_price(ticker="AAPL")')
    arguments: dict[str, Any] = {}
    try:
        for keyword in call.keywords:
            value = _literal(keyword.value)
            if keyword.arg is not None:
                arguments[keyword.arg] = value
            elif isinstance(value, dict):
                arguments.update(value)
            else:
                raise ValueError("** arguments must be a dict")
        positional = [_literal(arg) for arg in call.args]
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
        raise CodeCallError(f"arguments of {name}(...) must be literal values ({exc})") from None
    if positional:
        spec = registry.resolve(name) if registry is not None else None
        if spec is None:
            raise NotACall("positional arguments need the tool's schema to be named")
        names = [key for key in spec.properties if key not in arguments]
        if len(positional) > len(names):
            raise CodeCallError(f"{name}(...) takes at most {len(names)} positional argument(s)")
        arguments.update(zip(names, positional, strict=False))
    return name, arguments


def _alone_before(text: str, start: int) -> bool:
    """Only whitespace between the start of the line and `start` (looking back at most _LINE_LOOKBACK chars)."""
    window_start = max(0, start - _LINE_LOOKBACK)
    newline = text.rfind("\n", window_start, start)
    if newline == -1 and window_start > 0:
        return False
    return not text[newline + 1 : start].strip()


def _wrapped_in_print(text: str, start: int, end: int) -> tuple[int, int]:
    wrap_start = start - len(_PRINT_WRAP)
    if wrap_start >= 0 and text.startswith(_PRINT_WRAP, wrap_start) and text.startswith(")", end):
        return wrap_start, end + 1
    return start, end


def _attempt(text: str, start: int, end: int, registry: ToolRegistry | None) -> CallAttempt | None:
    try:
        name, arguments = read_call(text[start:end], registry)
    except NotACall:
        return None
    except CodeCallError as exc:
        return failed_attempt(start, end, FORMAT, str(exc)) if registry is not None else None
    if registry is None and not arguments:
        return None
    return CallAttempt(start, end, FORMAT, name, arguments)


def extract_code_calls(text: str, registry: ToolRegistry | None) -> list[CallAttempt]:
    if "(" not in text:
        return []
    pattern = _CALL_ANYWHERE if registry is not None else _CALL_AT_LINE_START
    attempts: list[CallAttempt] = []
    pos = 0
    budget = _SCAN_BUDGET_FACTOR * len(text) + _MAX_CALL_CHARS  # bounds rescans of unclosed calls (quadratic)
    for match in pattern.finditer(text):
        start, open_paren = match.start(1), match.end() - 1
        if start < pos:
            continue
        if registry is not None and registry.resolve(match.group(1).rsplit(".", 1)[-1]) is None:
            continue
        stop = min(len(text), start + _MAX_CALL_CHARS)
        end = call_end(text, open_paren, stop)
        budget -= (end or stop) - open_paren
        if budget < 0:
            break
        if end is None:
            if registry is not None and _alone_before(text, start):
                attempts.append(failed_attempt(start, len(text), FORMAT, f"unclosed parenthesis in {match.group(1)}("))
                break
            continue
        has_arguments = bool(text[open_paren + 1 : end - 1].strip())
        if registry is not None:
            start, end = _wrapped_in_print(text, start, end)
        alone = (registry is None or _alone_before(text, start)) and _LINE_REST.match(text, end) is not None
        if not alone and (registry is None or not has_arguments):
            continue
        attempt = _attempt(text, start, end, registry)
        if attempt is not None:
            attempts.append(attempt)
            pos = end
    return attempts
