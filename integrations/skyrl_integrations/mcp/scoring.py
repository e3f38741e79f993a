"""Reward of an MCP tool-use episode: a pure, deterministic function of the ground truth and what the agent did.

The ground truth is a dataset row's ``reward_spec.ground_truth`` (`GroundTruth.parse` validates it and names the
bad key). The reward is graded, so a small starting policy earns partial credit and GRPO gets signal early:

==============  ======  =============================================================================
component       weight  credit (each in [0, 1])
==============  ======  =============================================================================
format          0.1     at least one well-formed call was executed (any tool)
tool calls      0.2     fraction of `tool_sequence` steps matched, in order, by a call to that tool
                        (and that server, when the step names one; and whose result contains the
                        step's `result_contains`, when it gives one)
parameters      0.2     fraction of steps whose matched call had the expected `params` (every expected
                        key equal; extra arguments are ignored)
answer          0.5     the final answer matches `success.expected_answer` (`answer_match`: "numeric":
                        the answer's last number, dates aside, within a relative tolerance; "exact" after
                        normalisation; "contains" as a whole word/phrase); always 0 when `must_call_tool`
                        is set and no call ran
==============  ======  =============================================================================

The weights are the defaults of `RewardWeights`; the env's ``reward_weights`` key changes them (e.g. ``format: 0``:
with a weak starting policy, a credit for any executed call rewards calling whatever tool always runs, and GRPO then
moves every question onto that tool; see learnings/main-job-tool-choice.md). A component of weight 0 drops out like one
that does not apply; an episode whose applicable components all weigh 0 scores 0.

A step's `result_contains` is for free-text calls (a search whose query is the agent's own wording): such a step has
no expected parameters, so without it any call to the tool would earn the step's tool and parameter credit, and a
policy can farm that credit on every question (run L1, docs/results.md). With it, the search counts only
once it found what the next step needs (e.g. the ticker), compared case-insensitively.

Steps are matched to calls by an order-preserving alignment that maximises the tool + parameter credit, so a
wrong first attempt followed by a corrected call still earns full credit. Components that do not apply are left
out and the weights renormalised: without `tool_sequence`, format counts only if `must_call_tool` is set, and tool
calls / parameters drop out; without `expected_answer`, answer drops out. A ground truth with nothing to score is
rejected. A numeric answer is the last number the reply states (ISO dates are not numbers here): a reply that
lists several candidates, e.g. by echoing a whole tool result, commits to its last one, so copying every number of
an observation is not a way to be right. Finally, using more distinct servers or tools than `limits` allows caps
the reward at
`LIMIT_VIOLATION_CAP`. `success` is 1 when the answer matched (or, for tasks without an expected answer, when
every step was matched with the right parameters).

Worked example. Ground truth: ``tool_sequence = [get_stock_price(ticker=AAPL, date=2024-03-15)]``,
``expected_answer = "187.23"`` (numeric), ``must_call_tool = true``, ``limits.max_tools = 4``. The agent calls
``get_stock_price(ticker="MSFT", date="2024-03-15")``, then answers "It closed at 410.5". Format 1, tool calls
1/1, parameters 0/1, answer 0: reward = 0.1 + 0.2 = 0.3. Had it passed ``ticker="aapl"`` (strings compare
case-insensitively) and answered "AAPL closed at $187.23.", the reward would be 1.0. Answering "187.23" with no
call at all earns 0: the answer needs a call, and format / tool credit need one too.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

FORMAT_WEIGHT = 0.1
TOOL_WEIGHT = 0.2
PARAMS_WEIGHT = 0.2
ANSWER_WEIGHT = 0.5
LIMIT_VIOLATION_CAP = 0.25
"""The most an episode can earn when it used more distinct servers or tools than `limits` allows."""
COMPONENTS = ("format", "tools", "params", "answer")
NUMERIC_REL_TOL = 1e-3
"""Default relative tolerance of `answer_match: numeric` (override per task with `success.tolerance`)."""
ANSWER_MATCHES = ("numeric", "exact", "contains")
COMPLEXITIES = ("single", "multi_step", "cross_server")
NOT_EXECUTED = frozenset({"unknown_tool", "not_allowed"})
"""Error kinds of calls refused before reaching a server; they do not count as calls made."""

_NUMBER = re.compile(r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
"""A number, with optional thousands separators ("1,234,567.5") and exponent."""
ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
"""An ISO date: not a number in a numeric answer."""


# -------------------------------------------------------------------------------------------- ground truth


@dataclasses.dataclass(frozen=True)
class ToolStep:
    step: int
    tool: str
    server: str | None = None
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    result_contains: str | None = None
    """Text the matched call's result must contain (case-insensitive); None: any result."""


@dataclasses.dataclass(frozen=True)
class GroundTruth:
    task_id: str | None
    complexity: str | None
    max_turns: int | None
    must_call_tool: bool
    expected_answer: str | None
    answer_match: str
    tolerance: float
    tool_sequence: tuple[ToolStep, ...]
    max_servers: int | None
    max_tools: int | None

    @classmethod
    def parse(cls, value: Any, where: str = "reward_spec.ground_truth") -> GroundTruth:
        """Validate a ground-truth mapping (or its JSON text); errors name `where` and the bad key."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON ({exc})") from None
        gt = _mapping(value, where)
        success = _mapping(gt.get("success") or {}, f"{where}.success")
        limits = _mapping(gt.get("limits") or {}, f"{where}.limits")
        answer = success.get("expected_answer")
        match = success.get("answer_match") or ("numeric" if _is_number(answer) else "contains")
        if match not in ANSWER_MATCHES:
            raise ValueError(f"{where}.success.answer_match: expected one of {ANSWER_MATCHES}, got {match!r}")
        if answer is not None and match == "numeric" and not _is_number(answer):
            raise ValueError(f"{where}.success.expected_answer: {answer!r} is not a number (answer_match: numeric)")
        complexity = gt.get("complexity")
        if complexity is not None and complexity not in COMPLEXITIES:
            raise ValueError(f"{where}.complexity: expected one of {COMPLEXITIES}, got {complexity!r}")
        steps = gt.get("tool_sequence") or []
        if not isinstance(steps, Sequence) or isinstance(steps, str):
            raise ValueError(f"{where}.tool_sequence: expected a list of steps, got {type(steps).__name__}")
        parsed = cls(
            task_id=None if gt.get("task_id") is None else str(gt["task_id"]),
            complexity=complexity,
            max_turns=_positive_int(gt.get("max_turns"), f"{where}.max_turns"),
            must_call_tool=bool(success.get("must_call_tool", False)),
            expected_answer=None if answer is None else str(answer),
            answer_match=match,
            tolerance=float(success.get("tolerance", NUMERIC_REL_TOL)),
            tool_sequence=tuple(
                sorted(
                    (_parse_step(step, i, f"{where}.tool_sequence[{i}]") for i, step in enumerate(steps)),
                    key=lambda s: s.step,
                )
            ),
            max_servers=_positive_int(limits.get("max_servers"), f"{where}.limits.max_servers"),
            max_tools=_positive_int(limits.get("max_tools"), f"{where}.limits.max_tools"),
        )
        if not (parsed.tool_sequence or parsed.expected_answer is not None or parsed.must_call_tool):
            raise ValueError(
                f"{where}: nothing to score; give success.expected_answer, tool_sequence or success.must_call_tool"
            )
        return parsed


def _parse_step(value: Any, index: int, where: str) -> ToolStep:
    step = _mapping(value, where)
    tool = step.get("tool")
    if not isinstance(tool, str) or not tool:
        raise ValueError(f"{where}.tool: expected a tool name, got {tool!r}")
    params = _mapping(step.get("params") or {}, f"{where}.params")
    server = step.get("server")
    result_contains = step.get("result_contains")
    if result_contains is not None and (not isinstance(result_contains, str) or not result_contains.strip()):
        raise ValueError(f"{where}.result_contains: expected a non-empty string, got {result_contains!r}")
    return ToolStep(
        step=int(step.get("step", index + 1)),
        tool=tool,
        server=server or None,
        params=dict(params),
        result_contains=result_contains,
    )


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _positive_int(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 1:
        raise ValueError(f"{where}: expected a positive integer, got {value!r}")
    return int(value)


# ------------------------------------------------------------------------------------------------ weights


@dataclasses.dataclass(frozen=True)
class RewardWeights:
    """The weight of each reward component (the table of the module docstring); renormalised over the components
    that apply, so they need not sum to 1."""

    format: float = FORMAT_WEIGHT
    tools: float = TOOL_WEIGHT
    params: float = PARAMS_WEIGHT
    answer: float = ANSWER_WEIGHT

    @classmethod
    def parse(cls, value: Any, where: str = "reward_weights") -> RewardWeights:
        """A mapping of some of `COMPONENTS` to non-negative numbers (the others keep their defaults)."""
        weights = _mapping(value, where)
        unknown = sorted(set(weights) - set(COMPONENTS))
        if unknown:
            raise ValueError(f"{where}: unknown component(s) {unknown}; expected some of {list(COMPONENTS)}")
        for name, weight in weights.items():
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight < math.inf:
                raise ValueError(f"{where}.{name}: expected a non-negative number, got {weight!r}")
        parsed = cls(**{name: float(weight) for name, weight in weights.items()})
        if not any(getattr(parsed, name) for name in COMPONENTS):
            raise ValueError(f"{where}: every weight is 0, so every episode would score 0")
        return parsed


DEFAULT_REWARD_WEIGHTS = RewardWeights()


# ------------------------------------------------------------------------------------------------ episode


@dataclasses.dataclass(frozen=True)
class CallRecord:
    """One tool call the agent made: which server ran it, its arguments, its error kind (None: it worked) and the
    text it returned (its output, or its error message)."""

    server: str
    tool: str
    arguments: Mapping[str, Any]
    error_kind: str | None = None
    result: str = ""


@dataclasses.dataclass(frozen=True)
class EpisodeRecord:
    calls: tuple[CallRecord, ...] = ()
    final_answer: str | None = None
    """The agent's final reply (None if the episode ended without one, e.g. at `max_turns`)."""


@dataclasses.dataclass(frozen=True)
class Score:
    """Each component's credit (None: not applicable to this task), the limit check, and the result."""

    format: float | None
    tools: float | None
    params: float | None
    answer: float | None
    over_limits: bool
    reward: float
    success: bool


def score_episode(truth: GroundTruth, episode: EpisodeRecord, weights: RewardWeights = DEFAULT_REWARD_WEIGHTS) -> Score:
    """Score one finished episode (see the module docstring for the rules and a worked example)."""
    calls = [c for c in episode.calls if c.error_kind not in NOT_EXECUTED]
    components: list[tuple[float, float]] = []
    format_credit = tools_credit = params_credit = answer_credit = None
    if truth.tool_sequence or truth.must_call_tool:
        format_credit = float(bool(calls))
        components.append((weights.format, format_credit))
    if truth.tool_sequence:
        matched, with_params = _align(truth.tool_sequence, tuple(calls))
        tools_credit = matched / len(truth.tool_sequence)
        params_credit = with_params / len(truth.tool_sequence)
        components += [(weights.tools, tools_credit), (weights.params, params_credit)]
    if truth.expected_answer is not None:
        answered = episode.final_answer is not None and answer_matches(truth, episode.final_answer)
        answer_credit = float(answered and (bool(calls) or not truth.must_call_tool))
        components.append((weights.answer, answer_credit))
    total = sum(w for w, _ in components)
    reward = sum(w * c for w, c in components) / total if total else 0.0
    over_limits = _over_limits(truth, calls)
    if over_limits:
        reward = min(reward, LIMIT_VIOLATION_CAP)
    if answer_credit is not None:
        success = answer_credit == 1.0
    else:
        success = tools_credit == params_credit == 1.0 if truth.tool_sequence else format_credit == 1.0
    return Score(format_credit, tools_credit, params_credit, answer_credit, over_limits, reward, success)


def _over_limits(truth: GroundTruth, calls: list[CallRecord]) -> bool:
    servers = {c.server for c in calls}
    tools = {(c.server, c.tool) for c in calls}
    return (truth.max_servers is not None and len(servers) > truth.max_servers) or (
        truth.max_tools is not None and len(tools) > truth.max_tools
    )


def _align(steps: tuple[ToolStep, ...], calls: tuple[CallRecord, ...]) -> tuple[int, int]:
    """Order-preserving step <-> call alignment maximising tool + parameter credit; (steps matched, with params)."""

    @functools.cache
    def best(i: int, j: int) -> tuple[float, int, int]:
        if i == len(steps) or j == len(calls):
            return 0.0, 0, 0
        options = [best(i + 1, j), best(i, j + 1)]
        step, call = steps[i], calls[j]
        if _call_fits(step, call):
            good = int(_params_match(step.params, call.arguments))
            value, matched, with_params = best(i + 1, j + 1)
            options.append((value + TOOL_WEIGHT + PARAMS_WEIGHT * good, matched + 1, with_params + good))
        return max(options)

    _, matched, with_params = best(0, 0)
    return matched, with_params


def _call_fits(step: ToolStep, call: CallRecord) -> bool:
    """Whether `call` can be the call of `step`: its tool (and server), and a result that shows what it was for."""
    if call.tool != step.tool or (step.server is not None and call.server != step.server):
        return False
    if step.result_contains is None:
        return True
    return call.error_kind is None and step.result_contains.casefold() in call.result.casefold()


def _params_match(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    return all(key in actual and values_equal(value, actual[key]) for key, value in expected.items())


def values_equal(expected: Any, actual: Any) -> bool:
    """Parameter equality: numbers (or numeric strings) within 1e-6 relative, strings case- and
    whitespace-insensitive, lists element-wise, mappings on the expected keys."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and _params_match(expected, actual)
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(expected) == len(actual)
            and all(values_equal(e, a) for e, a in zip(expected, actual, strict=True))
        )
    if _is_number(expected) and _is_number(actual) and not isinstance(expected, bool):
        return math.isclose(float(expected), float(actual), rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(expected, str) and isinstance(actual, str):
        return _normalise(expected) == _normalise(actual)
    return expected == actual


# ------------------------------------------------------------------------------------------------- answers


def answer_matches(truth: GroundTruth, answer: str) -> bool:
    """Whether `answer` matches `truth.expected_answer` under `truth.answer_match`."""
    expected = truth.expected_answer
    if truth.answer_match == "numeric":
        target = float(expected.replace(",", ""))
        tolerance = truth.tolerance * abs(target) if target else truth.tolerance  # relative; absolute around 0
        stated = numbers_in(ISO_DATE.sub(" ", answer))
        return bool(stated) and abs(stated[-1] - target) <= tolerance
    if truth.answer_match == "exact":
        return _normalise(answer) == _normalise(expected)
    phrase = _normalise(expected)
    return bool(phrase) and re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", _normalise(answer)) is not None


def numbers_in(text: str) -> list[float]:
    """Every number written in `text` ("1,234.5" -> 1234.5; "$187.23" -> 187.23)."""
    return [float(match.replace(",", "")) for match in _NUMBER.findall(text)]


def _normalise(text: str) -> str:
    text = " ".join(str(text).casefold().split())
    return text.strip(" \"'`").rstrip(".!?").strip()


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return math.isfinite(value)
    if isinstance(value, str):
        try:
            return math.isfinite(float(value.replace(",", "")))
        except ValueError:
            return False
    return False
