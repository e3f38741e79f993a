"""JSON tool calls in running text: bare `{"name": ..., "arguments": ...}` objects (or lists of them) and OpenAI
`{"tool_calls": [...]}` messages.

Candidates are the bracketed regions that contain a call key ("name", "tool", "tool_calls", ...), outermost first.
A region that decodes is either calls or data; either way the regions nested in it are not looked at again. A region
that does not decode is a MALFORMED attempt unless a region nested in it turns out to be a call. The number of
regions decoded per message is capped and so is the text re-scanned by repairs (about twice the message), so
adversarial input ('{"name":' * 20000) stays cheap.
"""

from __future__ import annotations

from bisect import bisect_left

from skyrl_integrations.tool_parser.attempt import CallAttempt, attempts_from_calls, failed_attempt
from skyrl_integrations.tool_parser.call_shapes import CALL_KEY, FORMAT_JSON, calls_from_prose_json
from skyrl_integrations.tool_parser.lenient_json import JSONRepairError, bracket_regions, decode_json_prefix
from skyrl_integrations.tool_parser.schema import ToolRegistry

_MAX_DECODES = 32
_REPAIR_BUDGET_FACTOR = 2
_REPAIR_BUDGET_MIN = 65_536


def extract_json_calls(text: str, registry: ToolRegistry | None) -> list[CallAttempt]:
    key_positions = [match.start() for match in CALL_KEY.finditer(text)]
    if not key_positions:
        return []
    calls: list[CallAttempt] = []
    failures: list[CallAttempt] = []
    covered_until = 0
    decodes = 0
    repair_budget = _REPAIR_BUDGET_FACTOR * len(text) + _REPAIR_BUDGET_MIN  # chars; repairs rescan their region
    for start, end in bracket_regions(text):
        if start < covered_until:
            continue
        index = bisect_left(key_positions, start)
        if index == len(key_positions) or key_positions[index] >= end:
            continue
        decodes += 1
        if decodes > _MAX_DECODES:
            break
        repair = end - start <= repair_budget
        if repair:
            repair_budget -= end - start
        try:
            value, value_end = decode_json_prefix(text, start, end, repair=repair)
        except JSONRepairError as exc:
            if not failures or start >= failures[-1].end:
                failures.append(failed_attempt(start, end, FORMAT_JSON, f"malformed JSON: {exc}"))
            continue
        covered_until = value_end
        shaped = calls_from_prose_json(value, registry)
        if shaped is not None:
            calls.extend(attempts_from_calls(start, value_end, shaped[0], shaped[1]))
    if not failures:
        return calls
    attempts = calls + [
        failure for failure in failures if not any(failure.start <= c.start < failure.end for c in calls)
    ]
    attempts.sort(key=lambda attempt: attempt.start)
    return attempts
