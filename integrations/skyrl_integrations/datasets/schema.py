"""The MCP dataset row, one training question: one typed definition and one validator, shared by every generator
and converter.

Every generator in this package (rule-based, LLM-based, dependent-spec converter) builds rows through
``TaskRow(...).to_row()`` and checks rows read back with ``validate_row``; do not write a second schema.

A row is a SkyRL dataset row (``data_source``, ``prompt``, ``env_class``, ``reward_spec``, ``extra_info``) whose
``reward_spec.ground_truth`` tells ``MCPToolEnv`` how to score an episode::

    {
      "data_source": "mcp/market",
      "prompt": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}],
      "env_class": "mcp_tool",
      "reward_spec": {"method": "rule", "ground_truth": {
          "task_id": "market-0001",
          "complexity": "single",
          "max_turns": 3,
          "success": {"must_call_tool": true, "expected_answer": "187.23", "answer_match": "numeric"},
          "tool_sequence": [{"step": 1, "server": "market", "tool": "get_stock_price",
                             "params": {"ticker": "AAPL", "date": "2024-03-15"}}],
          "limits": {"max_servers": 1, "max_tools": 4}}},
      "extra_info": {"servers": ["market"], "tools": ["get_stock_price"], "split": "train", "index": 0}
    }

Rules ``validate_row`` enforces (each problem is reported with the dotted key at fault):

- ``prompt`` is compact: exactly ``[system, user]``, both non-empty strings.
- ``env_class`` is ``"mcp_tool"``; ``data_source`` is ``"mcp/<server>"`` for a server of ``extra_info.servers``
  (by convention the server of step 1), optionally followed by ``/<label>`` (the rule-based generator's template),
  which splits eval figures per label.
- ``tool_sequence`` is non-empty, its ``step`` numbers run 1, 2, 3, ...; every step's ``server`` is listed in
  ``extra_info.servers`` and its ``tool`` in ``extra_info.tools``; ``params`` is an object. It may leave out
  free-text arguments (a search query, a program) that any wording satisfies: ``MCPToolEnv`` compares only the
  keys given, and ``validate --execute`` does not replay such a call. Such a step may give ``result_contains`` instead
  (a non-empty string, e.g. the ticker a search has to find): only a call whose result contains it counts.
- ``limits`` cap what the agent may use (``MCPToolEnv`` caps the reward of an episode that uses more distinct tools
  or servers): the reference solution must fit, so the distinct tools of ``tool_sequence`` are at most
  ``limits.max_tools`` and its distinct servers at most ``limits.max_servers``. ``max_turns`` is at least the
  number of steps (one call per turn).
- ``complexity`` agrees with the sequence (``complexity_for``): ``single`` = one step, ``multi_step`` = several
  steps on one server, ``cross_server`` = steps on two or more servers.
- ``success.expected_answer`` is a non-empty string (a number for ``answer_match == "numeric"``);
  ``success.tolerance``, when given, a non-negative number.
- ``extra_info.split`` is ``train`` or ``validation``; ``extra_info.index`` a non-negative integer.

Extra keys (in the row, ``ground_truth`` or ``extra_info``) pass validation; ``TaskRow`` carries the extra
``extra_info`` entries (``TaskRow.extra``) and drops the others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ENV_CLASS = "mcp_tool"
DATA_SOURCE_PREFIX = "mcp/"
COMPLEXITIES = ("single", "multi_step", "cross_server")
ANSWER_MATCHES = ("numeric", "exact", "contains")
SPLITS = ("train", "validation")
DEFAULT_MAX_TOOLS = 4
"""Default ``limits.max_tools``: room for a look-up or a corrected call besides the reference solution's tools."""

__all__ = [
    "ANSWER_MATCHES",
    "COMPLEXITIES",
    "DEFAULT_MAX_TOOLS",
    "ENV_CLASS",
    "SPLITS",
    "TaskRow",
    "TaskRowError",
    "ToolStep",
    "complexity_for",
    "is_number",
    "row_problems",
    "validate_row",
]


class TaskRowError(ValueError):
    """A row that breaks the schema. ``problems`` holds ``(key, message)`` pairs; the message names ``where``."""

    def __init__(self, where: str, problems: list[tuple[str, str]]):
        self.where = where
        self.problems = problems
        lines = [f"{where}: invalid MCP dataset row"] + [f"  key {key!r}: {message}" for key, message in problems]
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class ToolStep:
    """One tool call of a question's reference solution."""

    step: int
    server: str
    tool: str
    params: dict[str, Any] = field(default_factory=dict)
    result_contains: str | None = None
    """Text the call's result must contain for the step to count (`scoring.ToolStep.result_contains`)."""

    def to_dict(self) -> dict[str, Any]:
        row = {"step": self.step, "server": self.server, "tool": self.tool, "params": dict(self.params)}
        return row if self.result_contains is None else {**row, "result_contains": self.result_contains}


def complexity_for(steps: Sequence[ToolStep]) -> str:
    """``single`` for one step, ``cross_server`` when the steps use two or more servers, else ``multi_step``."""
    if len({s.server for s in steps}) > 1:
        return "cross_server"
    return "single" if len(steps) == 1 else "multi_step"


@dataclass
class TaskRow:
    """One MCP question. ``to_row()`` gives the dataset row (module docstring); ``from_row`` parses and validates one.

    Left at their defaults, ``complexity`` is derived from the steps, ``servers``/``tools`` are those the steps
    use (in first-use order), ``max_turns`` is one more than the number of steps (a turn to answer),
    ``max_servers`` is the number of servers, ``max_tools`` is ``DEFAULT_MAX_TOOLS`` (or the number of distinct
    tools of the steps, if larger) and ``data_source`` is ``mcp/<server of step 1>``.
    """

    task_id: str
    system_prompt: str
    user_prompt: str
    tool_sequence: list[ToolStep]
    expected_answer: str
    answer_match: str = "exact"
    tolerance: float | None = None
    """Relative tolerance of a numeric answer (``success.tolerance``); None: the scorer's default."""
    must_call_tool: bool = True
    complexity: str | None = None
    max_turns: int | None = None
    servers: list[str] | None = None
    tools: list[str] | None = None
    max_servers: int | None = None
    max_tools: int | None = None
    split: str = "train"
    index: int = 0
    data_source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Additional ``extra_info`` entries (e.g. the generator that produced the row)."""

    def __post_init__(self) -> None:
        steps = self.tool_sequence
        if self.complexity is None:
            self.complexity = complexity_for(steps)
        if self.servers is None:
            self.servers = list(dict.fromkeys(s.server for s in steps))
        if self.tools is None:
            self.tools = list(dict.fromkeys(s.tool for s in steps))
        if self.max_turns is None:
            self.max_turns = len(steps) + 1
        if self.max_servers is None:
            self.max_servers = len(self.servers)
        if self.max_tools is None:
            self.max_tools = max(DEFAULT_MAX_TOOLS, len({s.tool for s in steps}))
        if self.data_source is None and steps:
            self.data_source = DATA_SOURCE_PREFIX + steps[0].server

    def to_row(self) -> dict[str, Any]:
        return {
            "data_source": self.data_source,
            "prompt": [
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": self.user_prompt},
            ],
            "env_class": ENV_CLASS,
            "reward_spec": {
                "method": "rule",
                "ground_truth": {
                    "task_id": self.task_id,
                    "complexity": self.complexity,
                    "max_turns": self.max_turns,
                    "success": {
                        "must_call_tool": self.must_call_tool,
                        "expected_answer": self.expected_answer,
                        "answer_match": self.answer_match,
                        **({} if self.tolerance is None else {"tolerance": self.tolerance}),
                    },
                    "tool_sequence": [s.to_dict() for s in self.tool_sequence],
                    "limits": {"max_servers": self.max_servers, "max_tools": self.max_tools},
                },
            },
            "extra_info": {
                **self.extra,
                "servers": list(self.servers),
                "tools": list(self.tools),
                "split": self.split,
                "index": self.index,
            },
        }

    @classmethod
    def from_row(cls, row: Any, where: str = "row") -> TaskRow:
        """Validate ``row`` (raising ``TaskRowError`` naming ``where`` and every bad key) and parse it."""
        problems = row_problems(row)
        if problems:
            raise TaskRowError(where, problems)
        truth = row["reward_spec"]["ground_truth"]
        success, limits, info = truth["success"], truth["limits"], row["extra_info"]
        known = {"servers", "tools", "split", "index"}
        return cls(
            task_id=truth["task_id"],
            system_prompt=row["prompt"][0]["content"],
            user_prompt=row["prompt"][1]["content"],
            tool_sequence=[
                ToolStep(s["step"], s["server"], s["tool"], dict(s.get("params") or {}), s.get("result_contains"))
                for s in truth["tool_sequence"]
            ],
            expected_answer=success["expected_answer"],
            answer_match=success["answer_match"],
            tolerance=success.get("tolerance"),
            must_call_tool=success["must_call_tool"],
            complexity=truth["complexity"],
            max_turns=truth["max_turns"],
            servers=list(info["servers"]),
            tools=list(info["tools"]),
            max_servers=limits["max_servers"],
            max_tools=limits["max_tools"],
            split=info["split"],
            index=info["index"],
            data_source=row["data_source"],
            extra={k: v for k, v in info.items() if k not in known},
        )


def validate_row(row: Any, where: str = "row") -> TaskRow:
    """The parsed row, or ``TaskRowError`` listing every problem as ``where: key '<dotted key>': <message>``."""
    return TaskRow.from_row(row, where)


def row_problems(row: Any) -> list[tuple[str, str]]:
    """Every ``(dotted key, message)`` problem of ``row``; empty when the row is valid."""
    if not isinstance(row, Mapping):
        return [("<row>", f"expected an object, got {type(row).__name__}")]
    problems: list[tuple[str, str]] = []
    problems += _prompt_problems(row.get("prompt"))
    if row.get("env_class") != ENV_CLASS:
        problems.append(("env_class", f"expected {ENV_CLASS!r}, got {row.get('env_class')!r}"))
    info = row.get("extra_info")
    info_ok = isinstance(info, Mapping)
    if not info_ok:
        problems.append(("extra_info", f"expected an object, got {_kind(info)}"))
        info = {}
    servers = _string_list(info.get("servers"), "extra_info.servers", problems) if info_ok else []
    tools = _string_list(info.get("tools"), "extra_info.tools", problems) if info_ok else []
    if info_ok:
        if info.get("split") not in SPLITS:
            problems.append(("extra_info.split", f"expected one of {', '.join(SPLITS)}, got {info.get('split')!r}"))
        index = info.get("index")
        if not _is_int(index) or index < 0:
            problems.append(("extra_info.index", f"expected a non-negative integer, got {index!r}"))
    data_source = row.get("data_source")
    if not (isinstance(data_source, str) and data_source.startswith(DATA_SOURCE_PREFIX)):
        problems.append(("data_source", f"expected '{DATA_SOURCE_PREFIX}<server>[/<label>]', got {data_source!r}"))
    elif info_ok and data_source[len(DATA_SOURCE_PREFIX) :].partition("/")[0] not in servers:
        problems.append(("data_source", f"server of {data_source!r} is not in extra_info.servers {servers}"))
    problems += _reward_spec_problems(row.get("reward_spec"), servers if info_ok else None, tools if info_ok else None)
    return problems


def _prompt_problems(prompt: Any) -> list[tuple[str, str]]:
    if not isinstance(prompt, list | tuple):
        return [("prompt", f"expected [system, user] messages, got {_kind(prompt)}")]
    roles = [m.get("role") if isinstance(m, Mapping) else None for m in prompt]
    if roles != ["system", "user"]:
        return [("prompt", f"expected a compact prompt with roles ['system', 'user'], got roles {roles}")]
    problems = []
    for i, message in enumerate(prompt):
        content = message.get("content")
        if not isinstance(content, str) or not content.strip():
            problems.append((f"prompt[{i}].content", f"expected a non-empty string, got {_kind(content)}"))
    return problems


def _reward_spec_problems(spec: Any, servers: list[str] | None, tools: list[str] | None) -> list[tuple[str, str]]:
    if not isinstance(spec, Mapping):
        return [("reward_spec", f"expected an object, got {_kind(spec)}")]
    problems = []
    if spec.get("method") != "rule":
        problems.append(("reward_spec.method", f"expected 'rule', got {spec.get('method')!r}"))
    truth = spec.get("ground_truth")
    key = "reward_spec.ground_truth"
    if not isinstance(truth, Mapping):
        return problems + [(key, f"expected an object, got {_kind(truth)}")]
    task_id = truth.get("task_id")
    if not isinstance(task_id, str) or not task_id.strip():
        problems.append((f"{key}.task_id", f"expected a non-empty string, got {task_id!r}"))
    steps = _sequence_problems(truth.get("tool_sequence"), servers, tools, problems)
    max_turns = truth.get("max_turns")
    if not _is_int(max_turns) or max_turns < max(1, len(steps)):
        problems.append(
            (f"{key}.max_turns", f"expected an integer >= {max(1, len(steps))} (one turn per step), got {max_turns!r}")
        )
    complexity = truth.get("complexity")
    if complexity not in COMPLEXITIES:
        problems.append((f"{key}.complexity", f"expected one of {', '.join(COMPLEXITIES)}, got {complexity!r}"))
    elif steps and complexity != complexity_for(steps):
        problems.append(
            (
                f"{key}.complexity",
                f"{complexity!r} does not match the tool_sequence ({len(steps)} step(s) on "
                f"{len({s.server for s in steps})} server(s) is {complexity_for(steps)!r})",
            )
        )
    problems += _success_problems(truth.get("success"), f"{key}.success")
    problems += _limits_problems(truth.get("limits"), f"{key}.limits", steps)
    return problems


def _sequence_problems(
    sequence: Any, servers: list[str] | None, tools: list[str] | None, problems: list[tuple[str, str]]
) -> list[ToolStep]:
    """Append the problems of ``tool_sequence`` to ``problems``; return its well-formed steps."""
    key = "reward_spec.ground_truth.tool_sequence"
    if not isinstance(sequence, list | tuple) or not sequence:
        problems.append((key, f"expected a non-empty list of steps, got {_kind(sequence)}"))
        return []
    steps = []
    for i, step in enumerate(sequence):
        where = f"{key}[{i}]"
        if not isinstance(step, Mapping):
            problems.append((where, f"expected an object, got {_kind(step)}"))
            continue
        if step.get("step") != i + 1 or not _is_int(step.get("step")):
            problems.append(
                (f"{where}.step", f"steps must be numbered 1, 2, 3, ...: expected {i + 1}, got {step.get('step')!r}")
            )
        server, tool, params = step.get("server"), step.get("tool"), step.get("params")
        ok = True
        for name, value, known, listed in (
            ("server", server, servers, "extra_info.servers"),
            ("tool", tool, tools, "extra_info.tools"),
        ):
            if not isinstance(value, str) or not value:
                problems.append((f"{where}.{name}", f"expected a non-empty string, got {value!r}"))
                ok = False
            elif known is not None and value not in known:
                problems.append((f"{where}.{name}", f"{value!r} is not listed in {listed} {known}"))
        if params is not None and not isinstance(params, Mapping):
            problems.append((f"{where}.params", f"expected an object, got {_kind(params)}"))
            ok = False
        result_contains = step.get("result_contains")
        if result_contains is not None and (not isinstance(result_contains, str) or not result_contains.strip()):
            problems.append((f"{where}.result_contains", f"expected a non-empty string, got {result_contains!r}"))
            ok = False
        if ok:
            steps.append(ToolStep(i + 1, server, tool, dict(params or {}), result_contains))
    return steps


def _success_problems(success: Any, key: str) -> list[tuple[str, str]]:
    if not isinstance(success, Mapping):
        return [(key, f"expected an object, got {_kind(success)}")]
    problems = []
    if not isinstance(success.get("must_call_tool"), bool):
        problems.append((f"{key}.must_call_tool", f"expected true or false, got {success.get('must_call_tool')!r}"))
    match = success.get("answer_match")
    if match not in ANSWER_MATCHES:
        problems.append((f"{key}.answer_match", f"expected one of {', '.join(ANSWER_MATCHES)}, got {match!r}"))
    answer = success.get("expected_answer")
    if not isinstance(answer, str) or not answer.strip():
        problems.append((f"{key}.expected_answer", f"expected a non-empty string, got {answer!r}"))
    elif match == "numeric" and not is_number(answer):
        problems.append((f"{key}.expected_answer", f"answer_match is 'numeric' but {answer!r} is not a number"))
    tolerance = success.get("tolerance")
    if tolerance is not None and not (
        isinstance(tolerance, int | float) and not isinstance(tolerance, bool) and 0 <= tolerance < math.inf
    ):
        problems.append((f"{key}.tolerance", f"expected a non-negative number, got {tolerance!r}"))
    return problems


def _limits_problems(limits: Any, key: str, steps: list[ToolStep]) -> list[tuple[str, str]]:
    if not isinstance(limits, Mapping):
        return [(key, f"expected an object, got {_kind(limits)}")]
    problems = []
    for name, used in (("max_tools", {s.tool for s in steps}), ("max_servers", {s.server for s in steps})):
        limit = limits.get(name)
        if not _is_int(limit) or limit < 1:
            problems.append((f"{key}.{name}", f"expected a positive integer, got {limit!r}"))
        elif len(used) > limit:
            what = name.removeprefix("max_")
            problems.append(
                (f"{key}.{name}", f"the tool_sequence uses {len(used)} {what} {sorted(used)}, more than {name}={limit}")
            )
    return problems


def _string_list(value: Any, key: str, problems: list[tuple[str, str]]) -> list[str]:
    if not isinstance(value, list | tuple) or not value or not all(isinstance(v, str) and v for v in value):
        problems.append((key, f"expected a non-empty list of names, got {value!r}"))
        return []
    return list(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(text: str) -> bool:
    """Whether ``text`` is a finite number (thousands separators allowed): the test for ``answer_match: numeric``."""
    try:
        return math.isfinite(float(text.strip().replace(",", "")))
    except ValueError:
        return False


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
