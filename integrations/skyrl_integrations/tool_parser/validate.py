"""Turn a `CallAttempt` into a `ToolCall`, or into the failure kind and message that explain why it is unusable."""

from __future__ import annotations

import re
from typing import Any

from skyrl_integrations.tool_parser.arguments import check_arguments
from skyrl_integrations.tool_parser.attempt import CallAttempt
from skyrl_integrations.tool_parser.lenient_json import JSONRepairError, loads_lenient
from skyrl_integrations.tool_parser.result import ParseFailure, ToolCall
from skyrl_integrations.tool_parser.schema import ToolRegistry

# MCP tool names: 1-128 of [A-Za-z0-9_.-]; a few harnesses also namespace with "/" or ":".
_TOOL_NAME = re.compile(r"[A-Za-z0-9_][\w.\-/:]{0,127}")

Checked = ToolCall | tuple[ParseFailure, str]


def _decode_arguments(raw: Any) -> tuple[dict[str, Any] | None, tuple[ParseFailure, str] | None]:
    if raw is None:
        return {}, None
    if isinstance(raw, str):
        if not raw.strip():
            return {}, None
        try:
            raw = loads_lenient(raw)
        except JSONRepairError as exc:
            return None, (ParseFailure.MALFORMED, f"arguments are not valid JSON: {exc}")
    if not isinstance(raw, dict):
        return None, (ParseFailure.INVALID_ARGUMENTS, f"arguments must be a JSON object, got {type(raw).__name__}")
    if not all(isinstance(key, str) for key in raw):
        return None, (ParseFailure.INVALID_ARGUMENTS, "argument names must be strings")
    return raw, None


def check_call(attempt: CallAttempt, registry: ToolRegistry | None, raw: str) -> Checked:
    """Validate name and arguments; with a registry, resolve the tool and check the arguments against its schema."""
    if attempt.failure is not None:
        return attempt.failure, attempt.error or attempt.failure.value
    name = attempt.name.strip() if isinstance(attempt.name, str) else attempt.name
    if not isinstance(name, str) or not name:
        return ParseFailure.MALFORMED, "the tool call has no tool name (a non-empty string under 'name')"
    arguments, problem = _decode_arguments(attempt.arguments)
    if problem is not None:
        failure, message = problem
        return failure, f"tool {name[:100]!r}: {message}"
    if registry is None:
        if not _TOOL_NAME.fullmatch(name):
            return ParseFailure.MALFORMED, f"invalid tool name {name[:100]!r}"
        return ToolCall(name, arguments, raw)
    spec = registry.resolve(name)
    if spec is None:
        return ParseFailure.UNKNOWN_TOOL, registry.unknown_tool_message(name)
    arguments, message = check_arguments(spec, arguments)
    if message is not None:
        return ParseFailure.INVALID_ARGUMENTS, message
    return ToolCall(spec.name, arguments, raw)
