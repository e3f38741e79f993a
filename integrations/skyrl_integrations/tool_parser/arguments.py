"""Check call arguments against a tool's input schema, repairing what is unambiguous.

Repairs: an argument under another name is moved to the schema's property when the match is unambiguous
(`ARGUMENT_ALIASES`, then the same name up to case/punctuation, then one name's words containing the other's:
`python_code` -> `code`; never when two keys of the call would land on one property: `start_date` and `end_date`
do not become `date`); a numeric string becomes a number and "true"/"false" a boolean when the schema says so;
a JSON string becomes an array/object when the schema says so; a `null` optional argument is dropped when the schema
does not allow null (the tool then uses its default). Checks: required keys, unknown keys when
`additionalProperties` is false, basic `type` (also `anyOf`/`oneOf` unions) and `enum` of top-level properties.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from skyrl_integrations.tool_parser.lenient_json import JSONRepairError, loads_lenient
from skyrl_integrations.tool_parser.schema import ToolSpec

ARGUMENT_ALIASES: dict[str, tuple[str, ...]] = {
    "q": ("query",),
    "query": ("q", "search_query"),
    "search_query": ("query", "q"),
    "search": ("query", "q"),
    "python_code": ("code",),
    "code": ("python_code", "source"),
    "source_code": ("code",),
    "script": ("code",),
    "symbol": ("ticker",),
    "ticker": ("symbol",),
    "text": ("message", "content"),
    "message": ("text", "content"),
    "content": ("text", "message"),
    "max_results": ("limit", "num_results"),
    "num_results": ("max_results", "limit"),
    "limit": ("max_results", "num_results"),
    "channel": ("channel_id",),
    "channel_id": ("channel",),
}
"""Well-known synonyms: an unknown argument key -> schema property names it may stand for, in preference order."""

_CAMEL_BOUNDARY = re.compile(r"([a-z0-9])([A-Z])")
_WORD = re.compile(r"[a-z0-9]+")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_INTEGER = re.compile(r"[-+]?\d+")
_MAX_NUMBER_CHARS = 100  # far below int()'s 4300-digit limit
_TYPE_CHECKS = {
    "string": lambda value: isinstance(value, str),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "number": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "array": lambda value: isinstance(value, list),
    "object": lambda value: isinstance(value, dict),
}


def _words(key: str) -> frozenset[str]:
    return frozenset(_WORD.findall(_CAMEL_BOUNDARY.sub(r"\1_\2", key).lower()))


def _squash(key: str) -> str:
    return "".join(_WORD.findall(key.lower()))


def _alias_target(key: str, spec: ToolSpec, arguments: Mapping[str, Any]) -> str | None:
    """The one unfilled schema property `key` stands for, or None when there is none or it is ambiguous."""
    unfilled = [prop for prop in spec.properties if prop not in arguments]
    for alias in ARGUMENT_ALIASES.get(key.lower(), ()):
        if alias in unfilled:
            return alias
    squashed = _squash(key)
    same = [prop for prop in unfilled if _squash(prop) == squashed]
    if len(same) == 1:
        return same[0]
    words = _words(key)
    if not words:
        return None
    overlapping = [prop for prop in unfilled if (other := _words(prop)) and (other <= words or words <= other)]
    return overlapping[0] if len(overlapping) == 1 else None


def _allowed_types(schema: Mapping[str, Any]) -> list[str] | None:
    """The JSON types a property accepts, in schema order; None when unrestricted."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    branches = schema.get("anyOf") or schema.get("oneOf")
    if not isinstance(branches, list):
        return None
    types: list[str] = []
    for branch in branches:
        branch_types = _allowed_types(branch) if isinstance(branch, Mapping) else None
        if branch_types is None:
            return None
        types.extend(t for t in branch_types if t not in types)
    return types


def _parse_number(text: str, integer: bool) -> int | float | None:
    text = text.strip()
    if len(text) > _MAX_NUMBER_CHARS or not _NUMBER.fullmatch(text):
        return None
    if _INTEGER.fullmatch(text):
        return int(text)
    value = float(text)
    if not math.isfinite(value):
        return None
    if integer:
        return int(value) if value.is_integer() else None
    return value


def _coerce(value: Any, target: str) -> tuple[bool, Any]:
    """Convert `value` to JSON type `target` when the conversion is lossless and obvious."""
    if target == "integer" and isinstance(value, float) and value.is_integer():
        return True, int(value)
    if not isinstance(value, str):
        return False, value
    if target in ("integer", "number"):
        number = _parse_number(value, integer=target == "integer")
        return number is not None, number
    if target == "boolean" and value.strip().lower() in ("true", "false"):
        return True, value.strip().lower() == "true"
    if target in ("array", "object"):
        try:
            decoded = loads_lenient(value)
        except JSONRepairError:
            return False, value
        return _TYPE_CHECKS[target](decoded), decoded
    return False, value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_value(key: str, value: Any, schema: Mapping[str, Any]) -> tuple[Any, str | None]:
    types = _allowed_types(schema)
    if types is not None and types and not any(_TYPE_CHECKS.get(t, lambda _: True)(value) for t in types):
        for target in types:
            converted, new_value = _coerce(value, target)
            if converted:
                value = new_value
                break
        else:
            expected = " or ".join(types)
            return value, f"argument {key!r} should be {expected}, got {type(value).__name__} {_short(value)}"
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        return value, f"argument {key!r} must be one of {_short(enum)}, got {_short(value)}"
    return value, None


def check_arguments(spec: ToolSpec, arguments: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Return `(arguments, None)` (possibly repaired, see module docstring) or `(arguments, error message)`."""
    if not spec.properties and not spec.required:
        return arguments, None
    checked = dict(arguments)
    unknown = [key for key in arguments if key not in spec.properties]
    targets = {key: _alias_target(key, spec, arguments) for key in unknown}
    claims = Counter(target for target in targets.values() if target is not None)
    for key in unknown:
        target = targets[key]
        if target is not None and claims[target] == 1:
            checked[target] = checked.pop(key)
        elif not spec.additional_properties:
            expected = ", ".join(spec.properties)
            return checked, f"tool {spec.name!r}: unknown argument {key[:100]!r} (arguments: {expected})"
    for key, schema in spec.properties.items():
        if key not in checked:
            continue
        value = checked[key]
        if value is None and key not in spec.required and "null" not in (_allowed_types(schema) or ["null"]):
            del checked[key]
            continue
        checked[key], problem = _check_value(key, value, schema)
        if problem is not None:
            return checked, f"tool {spec.name!r}: {problem}"
    missing = [key for key in spec.required if key not in checked]
    if missing:
        return checked, f"tool {spec.name!r}: missing required argument(s) {', '.join(map(repr, missing))}"
    return checked, None
