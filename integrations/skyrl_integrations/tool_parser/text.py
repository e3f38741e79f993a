"""The message text left once the call spans are cut out."""

from __future__ import annotations

import re

_EMPTY_FENCE = re.compile(r"```[\w+.\-]*[ \t]*\n?\s*```")
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def remove_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` without the given (possibly overlapping) spans, with fences left empty removed, blank runs collapsed
    and surrounding whitespace stripped."""
    pieces: list[str] = []
    pos = 0
    for start, end in sorted(spans):
        if start > pos:
            pieces.append(text[pos:start])
        pos = max(pos, end)
    pieces.append(text[pos:])
    for index in range(1, len(pieces)):  # "I used <call> and" -> "I used and", not "I used  and"
        if pieces[index - 1].endswith(" ") and pieces[index].startswith(" "):
            pieces[index] = pieces[index][1:]
    remaining = "".join(pieces)
    if "```" in remaining:
        remaining = _EMPTY_FENCE.sub("", remaining)
    return _BLANK_LINES.sub("\n\n", remaining).strip()
