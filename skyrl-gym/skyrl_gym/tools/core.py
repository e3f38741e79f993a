"""`@tool` and `ToolGroup`: a group of named, callable tools that an env executes.

class Calculator(ToolGroup):
    def __init__(self):
        super().__init__(name="Calculator")

    @tool
    def add(self, a, b):
        return a + b

Calculator().execute_tool("add", 1, 2)  # 3
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


class tool:  # noqa: N801 - lower-case, used as a decorator like upstream
    """Marks a method of a `ToolGroup` subclass as a tool named after the function."""

    def __init__(self, func: Callable[..., Any]):
        self.func = func
        self.name = func.__name__
        functools.update_wrapper(self, func)

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return functools.partial(self.func, instance)

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)


class ToolGroup:
    """Collects the `@tool` methods of its class into a name -> bound callable registry."""

    def __init__(self, name: str):
        self.name = name
        self._tool_registry: dict[str, Callable[..., Any]] = {}
        for cls in reversed(type(self).__mro__):
            for value in vars(cls).values():
                if isinstance(value, tool):
                    self._tool_registry[value.name] = value.__get__(self, type(self))

    def get_name(self) -> str:
        return self.name

    def get_tool(self, name: str) -> Callable[..., Any] | None:
        return self._tool_registry.get(name)

    def get_tool_names(self) -> list[str]:
        return list(self._tool_registry)

    def execute_tool(self, name: str, *args, **kwargs) -> Any:
        """Call tool `name`; an unknown name raises ValueError listing the group's tools."""
        fn = self._tool_registry.get(name)
        if fn is None:
            raise ValueError(f"tool {name!r} not found in group {self.name!r} (tools: {self.get_tool_names()})")
        return fn(*args, **kwargs)

    def get_tool_to_group_mapping(self) -> dict[str, str]:
        return {tool_name: self.name for tool_name in self._tool_registry}
