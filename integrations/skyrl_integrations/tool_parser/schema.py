"""Tool schemas as the parser sees them: `ToolSpec` (name + input JSON schema) and `ToolRegistry` (lookup by name).

Accepted tool forms: MCP `{"name", "description", "inputSchema"}` (also `input_schema`, as pydantic dumps it),
OpenAI `{"type": "function", "function": {"name", "description", "parameters"}}` and the legacy `{"name",
"parameters"}`. A tool without a usable name is a caller bug and raises ValueError naming its index.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_SCHEMA_KEYS = ("inputSchema", "input_schema", "parameters")
_NAME_PREFIX = re.compile(r"^.*[./]")  # "functions.get_price", "default_api.get_price" -> "get_price"
_NAME_SEPARATORS = re.compile(r"[\s\-]+")
_MAX_LISTED_TOOLS = 20
_MAX_NAME_CHARS = 256  # MCP caps names at 128; longer strings are not worth normalising


@dataclass(frozen=True)
class ToolSpec:
    """A tool's name and the parts of its input schema the parser checks."""

    name: str
    properties: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    additional_properties: bool = True

    @classmethod
    def from_tool(cls, tool: Mapping[str, Any], index: int = 0) -> ToolSpec:
        if not isinstance(tool, Mapping):
            raise ValueError(f"tools[{index}]: expected a dict, got {type(tool).__name__}")
        function = tool.get("function")
        if tool.get("type") == "function" and isinstance(function, Mapping):
            tool = function
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"tools[{index}]: missing or empty 'name' (keys: {sorted(tool)})")
        schema = next((tool[key] for key in _SCHEMA_KEYS if isinstance(tool.get(key), Mapping)), {})
        properties = schema.get("properties")
        properties = (
            {key: value for key, value in properties.items() if isinstance(value, Mapping)}
            if isinstance(properties, Mapping)
            else {}
        )
        required = schema.get("required")
        required = tuple(key for key in required if isinstance(key, str)) if isinstance(required, list) else ()
        return cls(name, properties, required, schema.get("additionalProperties", True) is not False)


def normalize_tool_name(name: str) -> str:
    """The form tool names are compared in when they do not match exactly: no namespace, lower case, `_`."""
    return _NAME_SEPARATORS.sub("_", _NAME_PREFIX.sub("", name.strip())).lower()


class ToolRegistry:
    """Tools by name. `resolve` forgives case, `-` vs `_` and namespace prefixes when the match is unambiguous."""

    def __init__(self, specs: Iterable[ToolSpec]):
        self._by_name: dict[str, ToolSpec] = {}
        normalized: dict[str, ToolSpec | None] = {}
        for spec in specs:
            self._by_name[spec.name] = spec
            key = normalize_tool_name(spec.name)
            normalized[key] = None if key in normalized else spec  # None marks an ambiguous normalised name
        self._by_normalized = {key: spec for key, spec in normalized.items() if spec is not None}

    @classmethod
    def from_tools(cls, tools: Sequence[Mapping[str, Any]]) -> ToolRegistry:
        """Build from MCP- or OpenAI-form tool dicts (see module docstring)."""
        if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
            raise ValueError(f"tools must be a list of tool dicts, got {type(tools).__name__}")
        return cls(ToolSpec.from_tool(tool, index) for index, tool in enumerate(tools))

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    def resolve(self, name: str) -> ToolSpec | None:
        spec = self._by_name.get(name)
        if spec is None and len(name) <= _MAX_NAME_CHARS:
            spec = self._by_normalized.get(normalize_tool_name(name))
        return spec

    def unknown_tool_message(self, name: str) -> str:
        names = self.names
        listed = ", ".join(names[:_MAX_LISTED_TOOLS]) + (", ..." if len(names) > _MAX_LISTED_TOOLS else "")
        return f"unknown tool {name[:100]!r}; available tools: {listed or '(none)'}"
