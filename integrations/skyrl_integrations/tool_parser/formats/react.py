"""ReAct style: an `Action:` line naming the tool and an `Action Input:` holding its arguments.

    Thought: I need the price.
    Action: get_price
    Action Input: {"ticker": "AAPL"}

The input runs until the next Observation/Thought/Action/Final Answer line. A JSON object is the arguments; a
bare value (`Action Input: AAPL`) is accepted only for a tool whose schema has exactly one property (or one required
property) to put it in. `Action: Final Answer` is an answer, not a call; an Action without an Action Input is prose.
"""

from __future__ import annotations

import re

from skyrl_integrations.tool_parser.attempt import CallAttempt, failed_attempt
from skyrl_integrations.tool_parser.formats.scanning import strip_span, unfence
from skyrl_integrations.tool_parser.lenient_json import JSONRepairError, decode_json_prefix
from skyrl_integrations.tool_parser.schema import ToolRegistry

FORMAT = "react"

_ACTION = re.compile(r"^[ \t]*(?:\*\*)?Action(?:\*\*)?[ \t]*:(?:\*\*)?[ \t]*(.*)$", re.M | re.I)
_ACTION_INPUT = re.compile(r"^[ \t]*(?:\*\*)?Action[ \t_]*Input(?:\*\*)?[ \t]*:(?:\*\*)?[ \t]*", re.M | re.I)
_SECTION_END = re.compile(r"^[ \t]*(?:\*\*)?(?:Observation|Thought|Action|Final[ \t]+Answer)\b", re.M | re.I)
_NAME_DECORATION = " \t`'\"*."
_FINAL_ANSWER = re.compile(r"final[ _]?answer", re.I)


def _single_value_arguments(name: str, value: str, registry: ToolRegistry | None) -> dict[str, str] | None:
    spec = registry.resolve(name) if registry is not None else None
    if spec is None:
        return None
    if len(spec.properties) == 1:
        return {next(iter(spec.properties)): value}
    if len(spec.required) == 1:
        return {spec.required[0]: value}
    return None


def _read_input(text: str, start: int, stop: int, name: str, registry: ToolRegistry | None) -> object:
    """The arguments in `text[start:stop]`: a dict, or a str explaining why they cannot be read."""
    start, stop = unfence(text, start, stop)
    if start == stop:
        return {}
    if text[start] in "{[":
        try:
            value, _ = decode_json_prefix(text, start, stop)
        except JSONRepairError as exc:
            return f"malformed JSON in Action Input: {exc}"
        return value
    value = text[start:stop]
    if value[0] == '"':
        try:
            decoded, _ = decode_json_prefix(text, start, stop)
        except JSONRepairError:
            decoded = None
        if isinstance(decoded, str):
            value = decoded
    arguments = _single_value_arguments(name, value, registry)
    if arguments is None:
        return 'Action Input must be a JSON object of arguments, e.g. {"ticker": "AAPL"}'
    return arguments


def extract_react_calls(text: str, registry: ToolRegistry | None) -> list[CallAttempt]:
    if "ction" not in text and "CTION" not in text:
        return []
    actions = list(_ACTION.finditer(text))
    attempts: list[CallAttempt] = []
    for index, action in enumerate(actions):
        section_stop = actions[index + 1].start() if index + 1 < len(actions) else len(text)
        name = action.group(1).strip(_NAME_DECORATION)
        if not name or _FINAL_ANSWER.fullmatch(name):
            continue
        action_input = _ACTION_INPUT.search(text, action.end(), section_stop)
        if action_input is None:
            continue
        section_end = _SECTION_END.search(text, action_input.end(), section_stop)
        input_stop = section_end.start() if section_end is not None else section_stop
        arguments = _read_input(text, action_input.end(), input_stop, name, registry)
        _, end = strip_span(text, action.start(), input_stop)
        if isinstance(arguments, str):
            attempts.append(failed_attempt(action.start(), end, FORMAT, arguments))
        else:
            attempts.append(CallAttempt(action.start(), end, FORMAT, name, arguments))
    return attempts
