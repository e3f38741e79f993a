"""@tool and ToolGroup, and BaseTextEnv's tool helpers."""

import pytest

from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.tools.core import ToolGroup, tool


class Calculator(ToolGroup):
    def __init__(self, name="Calculator"):
        super().__init__(name=name)
        self.offset = 0

    @tool
    def add(self, a, b):
        return a + b + self.offset

    @tool
    def negate(self, x):
        return -x

    def helper(self):
        return "not a tool"


class ScientificCalculator(Calculator):
    @tool
    def power(self, a, b):
        return a**b


class Strings(ToolGroup):
    def __init__(self):
        super().__init__(name="Strings")

    @tool
    def upper(self, s):
        return s.upper()


class ToolEnv(BaseTextEnv):
    def step(self, action):
        return {"observations": [], "reward": 0.0, "done": True}


def test_tools_are_collected_and_bound_to_the_instance():
    calc = Calculator()
    calc.offset = 10
    assert calc.get_tool_names() == ["add", "negate"]
    assert calc.execute_tool("add", 1, 2) == 13
    assert calc.get_tool("add")(b=1, a=1) == 12
    assert calc.get_tool("helper") is None


def test_tool_accessed_on_the_class_is_the_descriptor():
    assert isinstance(Calculator.add, tool)
    assert Calculator.add.name == "add"
    assert Calculator.add.func(Calculator(), 1, 1) == 2


def test_subclass_inherits_tools():
    assert ScientificCalculator().get_tool_names() == ["add", "negate", "power"]
    assert ScientificCalculator().execute_tool("power", 2, 5) == 32


def test_unknown_tool_raises_value_error_listing_tools():
    with pytest.raises(ValueError, match=r"tool 'mul' not found in group 'Calculator' \(tools: \['add', 'negate'\]\)"):
        Calculator().execute_tool("mul", 1, 2)


def test_tool_to_group_mapping():
    assert Calculator(name="calc").get_tool_to_group_mapping() == {"add": "calc", "negate": "calc"}


def test_env_indexes_tools_of_all_groups_and_executes_by_group():
    env = ToolEnv()
    env.init_tool_groups([Calculator(), Strings()])
    assert env.tool_to_toolgroup == {"add": "Calculator", "negate": "Calculator", "upper": "Strings"}
    assert env._execute_tool("Strings", "upper", ["abc"]) == "ABC"
    assert env._execute_tool("Calculator", "add", (2, 3)) == 5


def test_env_rejects_duplicate_tool_names_across_groups():
    with pytest.raises(ValueError, match="tool 'add' is provided by both 'A' and 'B'"):
        ToolEnv().init_tool_groups([Calculator(name="A"), Calculator(name="B")])


def test_env_execute_tool_requires_positional_list():
    env = ToolEnv()
    env.init_tool_groups([Strings()])
    with pytest.raises(TypeError, match="list or tuple"):
        env._execute_tool("Strings", "upper", "abc")


def test_env_execute_tool_with_unknown_group():
    env = ToolEnv()
    env.init_tool_groups([Strings()])
    with pytest.raises(ValueError, match=r"no tool group named 'Nope' \(have \['Strings'\]\)"):
        env._execute_tool("Nope", "upper", ["x"])
