"""JSON decoding that tolerates the slips models make, and bracket scanning to find JSON inside prose.

Strict `json` is tried first (C speed). Only when it fails is the bracketed region repaired: single-quoted strings,
Python `True/False/None`, trailing commas and missing closing brackets/quotes at the end of the region. Anything
still unreadable raises `JSONRepairError` carrying the strict decoder's message (a usable hint for the model).
Huge integer literals and deep nesting raise `ValueError` / `RecursionError` inside `json`; both are caught here.
"""

from __future__ import annotations

import json
import re
from typing import Any

_DECODER = json.JSONDecoder(strict=False)  # strict=False: raw newlines/tabs inside strings are accepted

_CLOSER = {"{": "}", "[": "]"}

# Tokens that matter for bracket matching inside a JSON-ish region. A double-quoted string may run unterminated to
# the end (group 1 then is None); single-quoted strings must close on their line, else the quote is just a char.
_REGION_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(")?|\'[^\'\\\n]*(?:\\.[^\'\\\n]*)*\'|[{}\[\]]', re.S)
_OPEN_BRACKET = re.compile(r"[{\[]")

# One pass of repairs over a region: keep JSON strings, convert single-quoted ones, map Python literals, drop
# trailing commas.
_REPAIR = re.compile(
    r'("[^"\\]*(?:\\.[^"\\]*)*")|\'([^\'\\]*(?:\\.[^\'\\]*)*)\'|\b(True|False|None)\b|,(?=\s*[}\]])',
    re.S,
)
_PY_TO_JSON = {"True": "true", "False": "false", "None": "null"}
_SEPARATORS = " \t\r\n,"


class JSONRepairError(ValueError):
    """The text is not JSON, even after lenient repair. The message says where strict decoding failed."""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (line {exc.lineno}, column {exc.colno})"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    message = str(exc)
    if "integer string conversion" in message:
        return "number literal too large"
    return message[:200]


def _repair_token(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return match.group(1)
    if match.group(2) is not None:
        inner = match.group(2).replace("\\'", "'").replace('"', '\\"')
        return f'"{inner}"'
    if match.group(3) is not None:
        return _PY_TO_JSON[match.group(3)]
    return ""  # trailing comma


def scan_region(text: str, start: int, stop: int) -> tuple[int, str | None]:
    """Match the bracket opened at `text[start]`, string-aware, looking no further than `stop`.

    Returns `(end, closers)`: `end` is just past the matching bracket and `closers` is "" when the region closes;
    when it runs to `stop` unclosed, `end == stop` and `closers` is what would close it (e.g. '"}}'). A mismatched
    closing bracket gives `(its position, None)`: the region cannot be repaired.
    """
    stack: list[str] = []
    for match in _REGION_TOKEN.finditer(text, start, stop):
        token = match.group()
        first = token[0]
        if first in _CLOSER:
            stack.append(first)
        elif first in "}]":
            if not stack or _CLOSER[stack[-1]] != first:
                return match.start(), None
            stack.pop()
            if not stack:
                return match.end(), ""
        elif first == '"' and match.group(1) is None:
            return stop, '"' + "".join(_CLOSER[b] for b in reversed(stack))
    return stop, "".join(_CLOSER[b] for b in reversed(stack))


def decode_json_prefix(text: str, start: int = 0, stop: int | None = None, *, repair: bool = True) -> tuple[Any, int]:
    """Decode the JSON value that begins at `text[start]` and return `(value, end)`; text after `end` is ignored.

    Leniently repairs objects and arrays (see module docstring) unless `repair` is False; raises `JSONRepairError`
    when the value cannot be read. Too-deep nesting and too-long numbers are not repairable, so not retried.
    """
    stop = len(text) if stop is None else stop
    window = text if start == 0 and stop == len(text) else text[start:stop]  # copy only this value's stretch
    try:
        value, end = _DECODER.raw_decode(window)
        return value, start + end
    except json.JSONDecodeError as exc:
        strict_error: BaseException = exc
    except (ValueError, RecursionError) as exc:
        raise JSONRepairError(_describe(exc)) from None
    if not repair or start >= stop or text[start] not in _CLOSER:
        raise JSONRepairError(_describe(strict_error))
    end, closers = scan_region(text, start, stop)
    if closers is None:
        raise JSONRepairError(_describe(strict_error))
    try:
        return _DECODER.decode(_REPAIR.sub(_repair_token, text[start:end] + closers)), end
    except (ValueError, RecursionError):
        raise JSONRepairError(_describe(strict_error)) from None


def loads_lenient(text: str) -> Any:
    """Decode a whole string as JSON (leniently); trailing non-whitespace is an error."""
    start = len(text) - len(text.lstrip())
    value, end = decode_json_prefix(text, start)
    if text[end:].strip():
        raise JSONRepairError(f"unexpected text after the JSON value: {text[end:end + 30]!r}")
    return value


def decode_json_sequence(text: str, start: int, stop: int) -> tuple[list[tuple[Any, int, int]], int]:
    """Decode consecutive JSON values (separated by whitespace or commas) from `start` up to `stop`.

    Returns `([(value, value_start, value_end), ...], end)` where `end` is where decoding stopped: the first character
    that does not begin a value. Raises `JSONRepairError` only when the very first value is unreadable.
    """
    values: list[tuple[Any, int, int]] = []
    pos = start
    while True:
        while pos < stop and text[pos] in _SEPARATORS:
            pos += 1
        if pos >= stop or text[pos] not in _CLOSER:
            return values, (values[-1][2] if values else pos)
        try:
            value, end = decode_json_prefix(text, pos, stop)
        except JSONRepairError:
            if values:
                return values, values[-1][2]
            raise
        values.append((value, pos, end))
        pos = end


def bracket_regions(text: str) -> list[tuple[int, int]]:
    """Every `{...}` / `[...]` region of `text`, nested ones included, as `(start, end)` sorted by start.

    Outside brackets everything is prose (quotes there are apostrophes, not strings); inside, strings are skipped.
    A bracket never closed yields a region running to the end of the text; a stray closing bracket is ignored.
    """
    regions: list[tuple[int, int]] = []
    stack: list[int] = []
    pos, size = 0, len(text)
    while pos < size:
        if not stack:
            match = _OPEN_BRACKET.search(text, pos)
            if match is None:
                break
            stack.append(match.start())
            pos = match.end()
            continue
        match = _REGION_TOKEN.search(text, pos)
        if match is None:
            break
        token = match.group()
        first = token[0]
        if first in _CLOSER:
            stack.append(match.start())
        elif first in "}]" and _CLOSER[text[stack[-1]]] == first:
            regions.append((stack.pop(), match.end()))
        pos = match.end()
    regions.extend((opened, size) for opened in stack)
    regions.sort()
    return regions
