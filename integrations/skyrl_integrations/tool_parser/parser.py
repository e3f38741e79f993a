"""`parse_tool_calls`: find the tool calls in one model message, whatever format the model used.

Formats are tried in precedence groups: explicit blocks (`<tool_call>` / `<function_call>` tags, ``` JSON fences),
then JSON in running text (OpenAI `tool_calls`, bare objects), XML blocks, ReAct, and last code-call syntax. The
first group with a valid call wins: its calls are returned, in message order, together with the failure of any of
its other attempts. When no group has a valid call, the first group with an attempt reports why it failed; when
none has an attempt, the message is a plain reply (`respond`, NO_CALL).
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from skyrl_integrations.tool_parser.attempt import CallAttempt
from skyrl_integrations.tool_parser.formats.code_calls import extract_code_calls
from skyrl_integrations.tool_parser.formats.fences import extract_fenced_calls
from skyrl_integrations.tool_parser.formats.json_objects import extract_json_calls
from skyrl_integrations.tool_parser.formats.react import extract_react_calls
from skyrl_integrations.tool_parser.formats.tags import extract_tag_calls
from skyrl_integrations.tool_parser.formats.xml_blocks import extract_xml_calls
from skyrl_integrations.tool_parser.result import ParseFailure, ParseResult, ToolCall
from skyrl_integrations.tool_parser.schema import ToolRegistry
from skyrl_integrations.tool_parser.text import remove_spans
from skyrl_integrations.tool_parser.validate import check_call

logger = logging.getLogger(__name__)

Extractor = Callable[[str, ToolRegistry | None], list[CallAttempt]]

PRECEDENCE: tuple[tuple[Extractor, ...], ...] = (
    (extract_tag_calls, extract_fenced_calls),
    (extract_json_calls,),
    (extract_xml_calls,),
    (extract_react_calls,),
    (extract_code_calls,),
)

INTERNAL_ERROR = "internal tool-parser error (this is a parser bug; the message was treated as a failed call)"
_MAX_REPORTED_ERRORS = 3


def _summarize(errors: list[str]) -> str | None:
    if not errors:
        return None
    summary = "; ".join(errors[:_MAX_REPORTED_ERRORS])
    if len(errors) > _MAX_REPORTED_ERRORS:
        summary += f"; and {len(errors) - _MAX_REPORTED_ERRORS} more failed call(s)"
    return summary


def _resolve(
    text: str, attempts: list[CallAttempt], registry: ToolRegistry | None, max_calls: int | None
) -> ParseResult:
    calls: list[ToolCall] = []
    failure: ParseFailure | None = None
    errors: list[str] = []
    spans: list[tuple[int, int]] = []
    call_format: str | None = None
    for attempt in attempts:
        if max_calls is not None and len(calls) >= max_calls:
            break  # calls past the limit are ignored and stay in the text
        spans.append((attempt.start, attempt.end))
        checked = check_call(attempt, registry, text[attempt.start : attempt.end])
        if isinstance(checked, ToolCall):
            calls.append(checked)
            call_format = call_format or attempt.format
        else:
            failure = failure or checked[0]
            errors.append(checked[1])
    return ParseResult(
        calls=calls,
        text=remove_spans(text, spans),
        format=call_format or attempts[0].format,
        failure=failure,
        error=_summarize(errors),
    )


def _group_attempts(text: str, group: tuple[Extractor, ...], registry: ToolRegistry | None) -> list[CallAttempt]:
    """The group's attempts in message order; a later extractor's attempt inside an earlier one's span (a ``` fence
    inside a <tool_call> tag) is the same call seen twice and is dropped."""
    attempts: list[CallAttempt] = []
    for extract in group:
        found = extract(text, registry)
        if attempts and found:
            claimed = sorted({(attempt.start, attempt.end) for attempt in attempts})
            starts = [start for start, _ in claimed]
            found = [attempt for attempt in found if not _overlaps(claimed, starts, attempt)]
        attempts.extend(found)
    attempts.sort(key=lambda attempt: attempt.start)
    return attempts


def _overlaps(claimed: list[tuple[int, int]], starts: list[int], attempt: CallAttempt) -> bool:
    """Whether `attempt` overlaps one of the disjoint, sorted `claimed` spans."""
    index = bisect_left(starts, attempt.end) - 1
    return index >= 0 and claimed[index][1] > attempt.start


def _parse(text: str, registry: ToolRegistry | None, max_calls: int | None) -> ParseResult:
    fallback: ParseResult | None = None
    for group in PRECEDENCE:
        attempts = _group_attempts(text, group, registry)
        if not attempts:
            continue
        result = _resolve(text, attempts, registry, max_calls)
        if result.calls:
            return result
        fallback = fallback or result
    return fallback or ParseResult(text=text.strip(), failure=ParseFailure.NO_CALL)


def parse_tool_calls(
    text: str,
    tools: Sequence[Mapping[str, Any]] | ToolRegistry | None = None,
    *,
    max_calls: int | None = None,
) -> ParseResult:
    """Parse the tool calls in one model message.

    Args:
        text: the model's message.
        tools: the available tools, MCP form (`{"name", "description", "inputSchema"}`) or OpenAI form
            (`{"type": "function", "function": {"name", "parameters"}}`), or a prebuilt `ToolRegistry`. When given,
            names must be among them (UNKNOWN_TOOL otherwise) and arguments must fit their schemas
            (INVALID_ARGUMENTS), after repairs like `python_code` -> `code`; see `arguments.py`.
        max_calls: return at most this many calls (the first ones); further calls are ignored.

    Never raises on any `text`: what cannot be read becomes a `ParseResult` with a `failure`. Raises TypeError /
    ValueError only for a caller bug (text not a str, bad `max_calls`, a tool without a name).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if max_calls is not None and (isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 1):
        raise ValueError(f"max_calls must be a positive int or None, got {max_calls!r}")
    registry = tools if isinstance(tools, ToolRegistry) or tools is None else ToolRegistry.from_tools(tools)
    try:
        return _parse(text, registry, max_calls)
    except Exception:  # a parser bug must not crash a training step; it is logged loudly instead
        logger.exception("tool_parser failed on a message of %d chars; treating it as a malformed call", len(text))
        return ParseResult(text=text.strip(), failure=ParseFailure.MALFORMED, error=INTERNAL_ERROR)
