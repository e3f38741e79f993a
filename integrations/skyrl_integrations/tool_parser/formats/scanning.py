"""Small text-scanning helpers shared by the extractors."""

from __future__ import annotations

import re

_NON_SPACE = re.compile(r"\S")


class NextMatch:
    """`pattern.search(text, pos)` for non-decreasing `pos`, re-searching only when the cached match falls behind.

    Looking up "the next closing tag" from every opening tag this way keeps a scan linear: a plain search per
    opening tag would rescan the same stretch once per tag (quadratic on "<tool_call>" * 10000).
    """

    def __init__(self, pattern: re.Pattern[str], text: str):
        self._pattern = pattern
        self._text = text
        self._match: re.Match[str] | None = None
        self._exhausted = False

    def at_or_after(self, pos: int) -> re.Match[str] | None:
        if self._match is not None and self._match.start() >= pos:
            return self._match
        if self._exhausted:
            return None
        self._match = self._pattern.search(self._text, pos)
        self._exhausted = self._match is None
        return self._match


def skip_space(text: str, pos: int, stop: int) -> int:
    """The first position in [pos, stop) that is not whitespace, or `stop`."""
    match = _NON_SPACE.search(text, pos, stop)
    return stop if match is None else match.start()


def strip_span(text: str, start: int, stop: int) -> tuple[int, int]:
    """`text[start:stop]` without surrounding whitespace, as positions."""
    segment = text[start:stop]
    stripped = segment.strip()
    if not stripped:
        return start, start
    lead = len(segment) - len(segment.lstrip())
    return start + lead, start + lead + len(stripped)


_FENCE_INFO = re.compile(r"```[ \t]*[\w+.\-]*[ \t]*\n")


def unfence(text: str, start: int, stop: int) -> tuple[int, int]:
    """When `text[start:stop]` (whitespace-stripped) is a ``` fenced block, the span of its content; else unchanged."""
    start, stop = strip_span(text, start, stop)
    opening = _FENCE_INFO.match(text, start, stop)
    if opening is None:
        return start, stop
    closing = text.rfind("```", opening.end(), stop)
    return strip_span(text, opening.end(), closing if closing != -1 else stop)
