"""JSON tool calls in ``` fenced blocks (```json, ```tool_call or no language).

Only fences whose content is JSON are read here; a fence of code-call syntax (```python get_price(...)```) is left to
the code-call extractor. JSON that is not call-shaped is data, not an attempt; unreadable JSON is an attempt only when
it has a call key ("name", "tool", ...). An unclosed fence (cut by a stop string) runs to the end of the message.
"""

from __future__ import annotations

import re

from skyrl_integrations.tool_parser.attempt import CallAttempt
from skyrl_integrations.tool_parser.formats.blocks import block_attempts, read_block
from skyrl_integrations.tool_parser.formats.scanning import skip_space
from skyrl_integrations.tool_parser.schema import ToolRegistry

FORMAT = "fenced_json"

_FENCE = re.compile(r"```")
_INFO_STRING = re.compile(r"[ \t]*[\w+.\-]*[ \t]*\n")


def extract_fenced_calls(text: str, registry: ToolRegistry | None) -> list[CallAttempt]:
    if "```" not in text:
        return []
    markers = [match.start() for match in _FENCE.finditer(text)]
    attempts: list[CallAttempt] = []
    for index in range(0, len(markers), 2):
        opening = markers[index]
        closing = markers[index + 1] if index + 1 < len(markers) else None
        info = _INFO_STRING.match(text, opening + 3)
        content_start = info.end() if info is not None else opening + 3
        content_stop = closing if closing is not None else len(text)
        block_end = closing + 3 if closing is not None else len(text)
        first = skip_space(text, content_start, content_stop)
        if first == content_stop or text[first] not in "{[":
            continue
        content = read_block(text, content_start, content_stop, FORMAT, registry, tagged=False)
        attempts.extend(block_attempts(text, opening, block_end, content, FORMAT, require_call_key=True))
    return attempts
