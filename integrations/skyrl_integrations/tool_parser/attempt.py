"""`CallAttempt`: what a format extractor found at one place in the message, before validation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skyrl_integrations.tool_parser.call_shapes import RawCall
from skyrl_integrations.tool_parser.result import ParseFailure


@dataclass(frozen=True, slots=True)
class CallAttempt:
    """A call (or a failed call) found in `text[start:end]`.

    `name` / `arguments` are raw (validated later against the tools); `failure` / `error` are set when the
    extractor already knows the attempt is unusable (unreadable JSON or call syntax).
    """

    start: int
    end: int
    format: str
    name: Any = None
    arguments: Any = None
    failure: ParseFailure | None = None
    error: str | None = None


def failed_attempt(
    start: int, end: int, fmt: str, error: str, failure: ParseFailure = ParseFailure.MALFORMED
) -> CallAttempt:
    return CallAttempt(start, end, fmt, failure=failure, error=error)


def attempts_from_calls(start: int, end: int, fmt: str, calls: list[RawCall]) -> list[CallAttempt]:
    """One attempt per call found in the block `text[start:end]` (they share the block's span)."""
    return [CallAttempt(start, end, fmt, name, arguments) for name, arguments in calls]
