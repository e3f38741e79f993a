"""Tool groups that environments execute."""

from skyrl_gym.tools.core import ToolGroup, tool

__all__ = ["ToolGroup", "tool"]
