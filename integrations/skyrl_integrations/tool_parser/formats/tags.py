"""`<tool_call>...</tool_call>` and `<function_call>...</function_call>` blocks (Hermes / Qwen style).

The body is JSON (one call, several, or a list), XML (`<function=name>...`, Qwen3-Coder) or code-call syntax.
A missing closing tag is normal — vLLM strips the stop string `</tool_call>` — so an unclosed block runs to the next
opening tag, a special token (`<|...`) or the end; text after the JSON in an unclosed block stays in the message.
"""

from __future__ import annotations

import re

from skyrl_integrations.tool_parser.attempt import CallAttempt
from skyrl_integrations.tool_parser.formats.blocks import block_attempts, read_block
from skyrl_integrations.tool_parser.formats.scanning import NextMatch, skip_space
from skyrl_integrations.tool_parser.schema import ToolRegistry

FORMATS = {"tool_call": "tool_call_tag", "function_call": "function_call_tag"}

_OPEN = re.compile(r"<(tool_call|function_call)\s*>", re.I)
_CLOSE = {tag: re.compile(rf"</{tag}\s*>", re.I) for tag in FORMATS}
_SPECIAL_TOKEN = "<|"


def extract_tag_calls(text: str, registry: ToolRegistry | None) -> list[CallAttempt]:
    if "<" not in text:
        return []
    openings = list(_OPEN.finditer(text))
    closes = {tag: NextMatch(pattern, text) for tag, pattern in _CLOSE.items()}
    attempts: list[CallAttempt] = []
    pos = 0
    for index, opening in enumerate(openings):
        if opening.start() < pos:
            continue
        tag = opening.group(1).lower()
        fmt = FORMATS[tag]
        body_start = opening.end()
        next_opening = openings[index + 1].start() if index + 1 < len(openings) else len(text)
        close = closes[tag].at_or_after(body_start)
        closed = close is not None and close.start() <= next_opening
        if closed:
            body_stop, block_end = close.start(), close.end()
        else:
            special = text.find(_SPECIAL_TOKEN, body_start, next_opening)
            body_stop = block_end = special if special != -1 else next_opening
            if skip_space(text, body_start, body_stop) == body_stop and body_stop == next_opening < len(text):
                continue  # "<tool_call><tool_call>{...}": a stutter, not a separate attempt
        content = read_block(text, body_start, body_stop, fmt, registry)
        if not closed and content.error is None:
            block_end = content.end
        attempts.extend(block_attempts(text, opening.start(), block_end, content, fmt))
        pos = block_end
    return attempts
