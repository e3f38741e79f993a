"""Reading the calls inside an explicit block (a `<tool_call>` tag or a ``` fence): JSON, XML or code-call syntax."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from skyrl_integrations.tool_parser.attempt import CallAttempt, attempts_from_calls, failed_attempt
from skyrl_integrations.tool_parser.call_shapes import CALL_KEY, calls_from_json, calls_from_prose_json
from skyrl_integrations.tool_parser.formats.code_calls import CodeCallError, NotACall, call_end, read_call
from skyrl_integrations.tool_parser.formats.scanning import unfence
from skyrl_integrations.tool_parser.formats.xml_blocks import extract_xml_blocks
from skyrl_integrations.tool_parser.lenient_json import JSONRepairError, decode_json_sequence
from skyrl_integrations.tool_parser.schema import ToolRegistry

NOT_A_CALL = 'expected a tool call like {"name": "get_price", "arguments": {"ticker": "AAPL"}}'


@dataclass
class BlockContent:
    """The calls read from a block, or why none could be.

    `end`: where the content that was read stops (an unclosed block gives the text after it back to the message).
    `is_data`: the content is well-formed JSON that is simply not a call (e.g. a fence holding example data).
    """

    end: int
    attempts: list[CallAttempt] = field(default_factory=list)
    error: str | None = None
    is_data: bool = False


def _read_json(text: str, start: int, stop: int, fmt: str, registry: ToolRegistry | None, tagged: bool) -> BlockContent:
    try:
        values, end = decode_json_sequence(text, start, stop)
    except JSONRepairError as exc:
        return BlockContent(stop, error=f"malformed JSON: {exc}")
    attempts: list[CallAttempt] = []
    for value, value_start, value_end in values:
        shaped = calls_from_json(value) if tagged else calls_from_prose_json(value, registry)
        if shaped is None:
            return BlockContent(end, error=NOT_A_CALL, is_data=True)
        attempts.extend(attempts_from_calls(value_start, value_end, fmt, shaped[1]))
    return BlockContent(end, attempts)


def _read_code_call(text: str, start: int, stop: int, fmt: str, registry: ToolRegistry | None) -> BlockContent:
    open_paren = text.find("(", start, stop)
    end = call_end(text, open_paren, stop) if open_paren != -1 else None
    if end is None:
        return BlockContent(stop, error=NOT_A_CALL)
    try:
        name, arguments = read_call(text[start:end], registry)
    except (CodeCallError, NotACall) as exc:
        return BlockContent(stop, error=str(exc))
    return BlockContent(end, [CallAttempt(start, end, fmt, name, arguments)])


def read_block(
    text: str, start: int, stop: int, fmt: str, registry: ToolRegistry | None, *, tagged: bool = True
) -> BlockContent:
    """The calls in `text[start:stop]`, looking through an inner ``` fence. Attempts carry format `fmt`.

    `tagged`: the block is an explicit tool-call tag, so `{"name": "list_channels"}` is a call even without an
    arguments key (in a ``` fence it could as well be data, see `calls_from_prose_json`).
    """
    start, stop = unfence(text, start, stop)
    if start == stop:
        return BlockContent(stop, error="the tool call block is empty")
    first = text[start]
    if first in "{[":
        return _read_json(text, start, stop, fmt, registry, tagged)
    if first == "<":
        attempts = [dataclasses.replace(attempt, format=fmt) for attempt in extract_xml_blocks(text, start, stop)]
        return BlockContent(attempts[-1].end, attempts) if attempts else BlockContent(stop, error=NOT_A_CALL)
    return _read_code_call(text, start, stop, fmt, registry)


def block_attempts(
    text: str, block_start: int, block_end: int, content: BlockContent, fmt: str, *, require_call_key: bool = False
) -> list[CallAttempt]:
    """The block's attempts, each spanning the whole block `text[block_start:block_end]`.

    Unreadable content is one MALFORMED attempt; with `require_call_key` (fences) only when the content looks like a
    call (has a "name"/"tool"/... key), and well-formed non-call JSON (data) is never an attempt.
    """
    if content.error is None:
        return [dataclasses.replace(attempt, start=block_start, end=block_end) for attempt in content.attempts]
    if require_call_key and (content.is_data or not CALL_KEY.search(text, block_start, block_end)):
        return []
    return [failed_attempt(block_start, block_end, fmt, content.error)]
