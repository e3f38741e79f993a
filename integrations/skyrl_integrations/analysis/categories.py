"""Rule-based failure categories of a dumped trajectory.

Observations are the non-assistant messages after the prompt (tool results, env feedback). Each observation
gets at most one category, the first of these whose pattern (case-insensitive) it contains:

1. `authorization_error`: an HTTP 401/403 status ("HTTP 401", "status 403", "403 Forbidden"), "unauthorized",
   "forbidden", "permission denied", "access denied", "not authorized", "invalid/missing/expired API key, token
   or credentials", "authentication failed/required/error";
2. `tool_argument_error`: "invalid argument/parameter/input/value/type", "missing (required) argument/parameter/
   field/property", "... is a required property", "unexpected keyword argument", "validation error",
   "TypeError", "could not / failed to parse", "parse error", "invalid JSON", "malformed", "JSONDecodeError",
   and calls of a tool that does not exist ("unknown tool", "tool <name> not found", "no such function");
3. `resource_not_found`: an HTTP 404 status, "not found", "no such <thing>", "does not exist", "could not find",
   "unknown [crypto] ticker/symbol";
4. `context_overflow`: "context length/window/limit", "maximum context", "too many tokens", "prompt is too long".

Besides the observations:

- `tool_argument_error` also when the dump records parse failures (`parse_failures` > 0): the model's tool call
  could not be parsed at all;
- `context_overflow` also when the stop reason is `length`: the context or the per-turn generation budget ran
  out (the dump does not say which);
- `false_completion`: the trajectory is not a success, its stop reason is `stop` (or unrecorded), and its last
  assistant message claims it is done: "task is complete/done", "I have completed/created/updated/...",
  "successfully", "all done", "<done>", or a final answer ("#### <n>", "final answer", "the answer is");
- `other_tool_error`: the env counted tool errors (`env_metrics.tool_errors` > 0) but no observation matched the
  tool-error categories above;
- infrastructure failures, one category per stop reason in `INFRA_STOP_REASONS` (the values of
  `skyrl_gym.InfraFailureReason`: `engine_failed`, `env_init_failed`, `env_step_failed`, `timeout`,
  `tool_server_failed`, `user_simulator_failed`); the snippet is the dumped failure's error when the dump has one.

Dumps without messages (upstream's) are split into messages at ChatML / Llama 3 markers; with any other template
only the stop-reason, parse-failure and score rules apply.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from skyrl_gym import InfraFailureReason
from skyrl_gym.common.stop_reasons import TrajectoryStopReason
from skyrl_integrations.analysis.dumps import DumpedTrajectory

INFRA_STOP_REASONS = tuple(sorted(reason.value for reason in InfraFailureReason))
"""The generator's infrastructure-failure stop reasons."""

_STATUS = r"\b(?:http|status|error|code)\b\W{0,3}(?:code\W{0,3})?"
AUTHORIZATION_ERROR = re.compile(
    rf"{_STATUS}40[13]\b|\b40[13]\W{{0,3}}(?:unauthori[sz]ed|forbidden)|\bunauthori[sz]ed\b|\bforbidden\b"
    r"|permission denied|access denied|not authori[sz]ed"
    r"|(?:invalid|missing|expired|bad) (?:api[ _-]?key|token|credentials?|auth\w*)"
    r"|authentication (?:failed|required|error)",
    re.IGNORECASE,
)
TOOL_ARGUMENT_ERROR = re.compile(
    r"invalid (?:argument|parameter|param|input|value|type)s?\b"
    r"|missing (?:\d+ )?(?:required )?(?:positional |keyword )?(?:argument|parameter|field|property|key)s?\b"
    r"|is a required (?:property|argument|parameter|field)|unexpected keyword argument|validation error"
    r"|\btype ?error\b|(?:could not|couldn't|failed to|unable to) parse|parse error|invalid json|malformed"
    r"|json ?decode ?error|unknown (?:tool|function)|no such (?:tool|function)"
    r"|\b(?:tool|function)\s+(?:['\"`]?[\w.-]+['\"`]?\s+)?(?:not found|does not exist|is not available)",
    re.IGNORECASE,
)
RESOURCE_NOT_FOUND = re.compile(
    rf"{_STATUS}404\b|\b404\W{{0,3}}not found|not found|no such \w+|does not exist|doesn't exist"
    r"|(?:could not|couldn't|cannot|can't) find|unknown (?:crypto )?(?:ticker|symbol)",
    re.IGNORECASE,
)
CONTEXT_OVERFLOW = re.compile(
    r"context (?:length|window|limit)|maximum context|too many tokens|prompt is too long", re.IGNORECASE
)
COMPLETION_CLAIM = re.compile(
    r"\b(?:task|request|job|everything|it|that)\s+(?:is|has been|was)\s+(?:now\s+)?(?:successfully\s+)?"
    r"(?:complete|completed|done|finished|resolved)\b"
    r"|\bi(?:\s+have|'ve)\s+(?:now\s+)?(?:successfully\s+)?"
    r"(?:completed|finished|done|created|updated|booked|sent|fixed|resolved|cancell?ed)\b"
    r"|\bsuccessfully\b|\ball done\b|<done>|^\s*####\s*\S|\bfinal answer\b|\bthe answer is\b",
    re.IGNORECASE | re.MULTILINE,
)

OBSERVATION_RULES = (
    ("authorization_error", AUTHORIZATION_ERROR),
    ("tool_argument_error", TOOL_ARGUMENT_ERROR),
    ("resource_not_found", RESOURCE_NOT_FOUND),
    ("context_overflow", CONTEXT_OVERFLOW),
)
TOOL_ERROR_CATEGORIES = frozenset({"authorization_error", "tool_argument_error", "resource_not_found"})
CATEGORIES = (
    "tool_argument_error",
    "authorization_error",
    "resource_not_found",
    "false_completion",
    "context_overflow",
    "other_tool_error",
    *INFRA_STOP_REASONS,
)
"""Every category, in report order."""

SNIPPET_BEFORE, SNIPPET_AFTER = 60, 100
"""Characters of context kept before the start and after the end of a match."""


@dataclass(frozen=True)
class Finding:
    category: str
    snippet: str
    """The text that triggered it, with some context (whitespace collapsed)."""


def classify(trajectory: DumpedTrajectory, success_threshold: float | None = None) -> list[Finding]:
    """Every finding in the trajectory, in message order (one trajectory can have several categories)."""
    findings = list(_observation_findings(trajectory))
    if trajectory.parse_failures:
        findings.append(Finding("tool_argument_error", f"parse_failures={trajectory.parse_failures}"))
    last_text = _last_assistant_text(trajectory)
    reason = trajectory.stop_reason
    if reason == TrajectoryStopReason.LENGTH:
        findings.append(Finding("context_overflow", f"stop_reason=length: {_tail(last_text)}"))
    if reason in INFRA_STOP_REASONS:
        detail = last_text if trajectory.infra_failure is None else trajectory.infra_failure.error
        findings.append(Finding(reason, f"stop_reason={reason}: {_tail(detail)}"))
    if not trajectory.succeeded(success_threshold) and reason in (TrajectoryStopReason.STOP, None):
        claim = COMPLETION_CLAIM.search(last_text)
        if claim is not None:
            findings.append(Finding("false_completion", snippet(last_text, claim)))
    tool_errors = trajectory.env_metrics.get("tool_errors")
    matched = any(finding.category in TOOL_ERROR_CATEGORIES for finding in findings)
    if isinstance(tool_errors, int | float) and tool_errors > 0 and not matched:
        findings.append(Finding("other_tool_error", f"tool_errors={tool_errors} (no observation matched a rule)"))
    return findings


def snippet(text: str, match: re.Match) -> str:
    start, end = max(match.start() - SNIPPET_BEFORE, 0), min(match.end() + SNIPPET_AFTER, len(text))
    body = " ".join(text[start:end].split())
    return f"{'…' if start > 0 else ''}{body}{'…' if end < len(text) else ''}"


def _observation_findings(trajectory: DumpedTrajectory) -> Iterator[Finding]:
    for message in trajectory.response or []:
        if message["role"] == "assistant":
            continue
        text = message["content"]
        for category, pattern in OBSERVATION_RULES:
            match = pattern.search(text)
            if match is not None:
                yield Finding(category, snippet(text, match))
                break


def _last_assistant_text(trajectory: DumpedTrajectory) -> str:
    if trajectory.response is None:
        return trajectory.output_response
    texts = [message["content"] for message in trajectory.response if message["role"] == "assistant"]
    return texts[-1] if texts else ""


def _tail(text: str) -> str:
    """The end of `text` (whitespace collapsed), with an ellipsis if cut."""
    return f"{'…' if len(text) > SNIPPET_AFTER else ''}{' '.join(text[-SNIPPET_AFTER:].split())}"
