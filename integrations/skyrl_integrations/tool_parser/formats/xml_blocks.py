"""XML-style tool blocks, read leniently with regexes (model output is rarely well-formed XML):

    <tool name="get_price">{"ticker": "AAPL"}</tool>
    <tool name="get_price"><ticker>AAPL</ticker></tool>
    <tool><name>get_price</name><arguments>{"ticker": "AAPL"}</arguments></tool>
    <invoke name="get_price"><parameter name="ticker">AAPL</parameter></invoke>
    <function=get_price><parameter=ticker>AAPL</parameter></function>        (Qwen3-Coder)

Element values are strings (entities unescaped); the schema check later turns "5" into 5 where the tool wants a
number. A block with no tool name at all is not counted as an attempt (it is more likely prose about XML). A block
missing its closing tag runs to the next block or the end of the message (a stop string may have cut it).
"""

from __future__ import annotations

import html
import re
from bisect import bisect_left

from skyrl_integrations.tool_parser.attempt import CallAttempt, failed_attempt
from skyrl_integrations.tool_parser.formats.scanning import NextMatch, strip_span
from skyrl_integrations.tool_parser.lenient_json import JSONRepairError, decode_json_prefix
from skyrl_integrations.tool_parser.schema import ToolRegistry

FORMAT = "xml"

_BLOCK_OPEN = re.compile(r"<(tool|invoke)\b([^<>]*)>|<(function)=([^<>\s]+)\s*>", re.I)
_BLOCK_CLOSE = {kind: re.compile(rf"</{kind}\s*>", re.I) for kind in ("tool", "invoke", "function")}
_NAME_ATTRIBUTE = re.compile(r"""\bname\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'/>]+))""", re.I)
_ELEMENT_OPEN = re.compile(
    r"""<(?:(parameter|param|argument|arg)\s+name\s*=\s*["']?([^"'<>]+?)["']?"""
    r"""|(parameter|param)=([^<>\s]+?)|([A-Za-z_][\w.\-]*))\s*>"""
)
_ELEMENT_CLOSE = re.compile(r"</([A-Za-z_][\w.\-]*)\s*>")
_NAME_ELEMENTS = ("name", "tool_name")
_ARGUMENT_ELEMENTS = ("arguments", "args", "parameters", "params", "input")


def _element_value(text: str, start: int, stop: int) -> str:
    start, stop = strip_span(text, start, stop)
    value = text[start:stop]
    return html.unescape(value) if "&" in value else value


def read_elements(text: str, start: int, stop: int) -> dict[str, tuple[int, int]]:
    """Top-level child elements of `text[start:stop]` as {key: (value_start, value_stop)}; unclosed ones skipped.

    `<parameter name="k">` / `<parameter=k>` give key k; a plain `<k>` gives key k. A repeated key keeps its first.
    """
    closes: dict[str, list[re.Match[str]]] = {}
    for close in _ELEMENT_CLOSE.finditer(text, start, stop):
        closes.setdefault(close.group(1), []).append(close)
    close_starts = {tag: [match.start() for match in matches] for tag, matches in closes.items()}
    elements: dict[str, tuple[int, int]] = {}
    pos = start
    while True:
        opening = _ELEMENT_OPEN.search(text, pos, stop)
        if opening is None:
            return elements
        tag = opening.group(1) or opening.group(3) or opening.group(5)
        key = opening.group(2) or opening.group(4) or opening.group(5)
        starts = close_starts.get(tag, [])
        index = bisect_left(starts, opening.end())
        if index == len(starts):
            pos = opening.end()
            continue
        elements.setdefault(key.strip(), (opening.end(), starts[index]))
        pos = closes[tag][index].end()


def _block_arguments(text: str, start: int, stop: int, skip_name: bool) -> dict[str, str] | str:
    """Arguments of a block body: JSON object, an <arguments> wrapper, or child elements. A str is an error."""
    body_start, body_stop = strip_span(text, start, stop)
    if body_start < body_stop and text[body_start] == "{":
        try:
            value, _ = decode_json_prefix(text, body_start, body_stop)
        except JSONRepairError as exc:
            return f"malformed JSON arguments in the XML tool block: {exc}"
        return value
    elements = read_elements(text, body_start, body_stop)
    if skip_name:
        for key in _NAME_ELEMENTS:
            elements.pop(key, None)
    wrapper = next((elements[key] for key in _ARGUMENT_ELEMENTS if key in elements), None)
    if wrapper is not None:
        return _block_arguments(text, *wrapper, skip_name=False)
    if not elements and not skip_name and body_start < body_stop:
        return "the XML tool block's arguments must be a JSON object or child elements like <ticker>AAPL</ticker>"
    return {key: _element_value(text, *span) for key, span in elements.items()}


def _block_name(text: str, opening: re.Match[str], body_start: int, body_stop: int) -> tuple[str | None, bool]:
    """(tool name, whether it came from a <name> child element)."""
    if opening.group(3):
        return opening.group(4), False
    attribute = _NAME_ATTRIBUTE.search(opening.group(2))
    if attribute is not None:
        return next(group for group in attribute.groups() if group is not None), False
    elements = read_elements(text, body_start, body_stop)
    for key in _NAME_ELEMENTS:
        if key in elements:
            return _element_value(text, *elements[key]), True
    return None, False


def extract_xml_blocks(text: str, start: int = 0, stop: int | None = None) -> list[CallAttempt]:
    """Attempts for the XML tool blocks in `text[start:stop]`."""
    stop = len(text) if stop is None else stop
    closes = {kind: NextMatch(pattern, text) for kind, pattern in _BLOCK_CLOSE.items()}
    openings = list(_BLOCK_OPEN.finditer(text, start, stop))
    attempts: list[CallAttempt] = []
    pos = start
    for index, opening in enumerate(openings):
        if opening.start() < pos:
            continue
        kind = (opening.group(1) or opening.group(3)).lower()
        body_start = opening.end()
        next_block = openings[index + 1].start() if index + 1 < len(openings) else stop
        self_closing = kind != "function" and opening.group(2).rstrip().endswith("/")
        close = None if self_closing else closes[kind].at_or_after(body_start)
        if self_closing:
            body_stop = block_end = body_start
        elif close is not None and close.end() <= stop and close.start() <= next_block:
            body_stop, block_end = close.start(), close.end()
        else:
            body_stop = block_end = next_block
        name, from_element = _block_name(text, opening, body_start, body_stop)
        if name is None:
            continue
        arguments = _block_arguments(text, body_start, body_stop, skip_name=from_element)
        if isinstance(arguments, str):
            attempts.append(failed_attempt(opening.start(), block_end, FORMAT, arguments))
        else:
            attempts.append(CallAttempt(opening.start(), block_end, FORMAT, name, arguments))
        pos = block_end
    return attempts


def extract_xml_calls(text: str, registry: ToolRegistry | None) -> list[CallAttempt]:
    if "<" not in text:
        return []
    return extract_xml_blocks(text)
