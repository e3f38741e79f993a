"""The parser's public result types: `ToolCall`, `ParseResult` and `ParseFailure`."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class ParseFailure(enum.StrEnum):
    """Why a message did not yield a clean set of tool calls."""

    NO_CALL = "no_call"
    """No call was attempted: the message is a plain natural-language reply."""
    MALFORMED = "malformed_json"
    """A call was attempted but its JSON / call syntax could not be read, even after lenient repair."""
    UNKNOWN_TOOL = "unknown_tool"
    """A call names a tool that is not among the given tools."""
    INVALID_ARGUMENTS = "invalid_arguments"
    """A call's arguments do not match the tool's input schema (missing required key, wrong type, ...)."""


@dataclass(frozen=True)
class ToolCall:
    """One parsed call. `raw` is the text span the call was read from (the whole block when a block holds several)."""

    name: str
    arguments: dict[str, Any]
    raw: str


@dataclass(frozen=True)
class ParseResult:
    """What `parse_tool_calls` found in one message.

    - `calls`: the valid calls, in message order (at most `max_calls`).
    - `text`: the message with the call spans removed, stripped: the model's thoughts or its answer.
    - `format`: which format the calls (or the failed attempt) used, e.g. "tool_call_tag"; None when no call.
    - `failure`: NO_CALL for a plain reply; MALFORMED / UNKNOWN_TOOL / INVALID_ARGUMENTS when an attempted call
      failed (possibly alongside other calls that parsed); None when every attempt parsed.
    - `error`: a short human-readable explanation of a failed attempt, meant to be shown to the model as a hint.
    """

    calls: list[ToolCall] = field(default_factory=list)
    text: str = ""
    format: str | None = None
    failure: ParseFailure | None = None
    error: str | None = None

    @property
    def action(self) -> str:
        """ "tool_call" when there is at least one valid call, else "respond"."""
        return "tool_call" if self.calls else "respond"

    @property
    def ok(self) -> bool:
        """True when nothing went wrong: every attempted call parsed, or the message is a plain reply (NO_CALL)."""
        return self.failure is None or self.failure is ParseFailure.NO_CALL
