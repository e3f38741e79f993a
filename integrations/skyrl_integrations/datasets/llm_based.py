"""LLM-based MCP question generation through any OpenAI-compatible endpoint, every question checked by executing it.

    python -m skyrl_integrations.datasets.llm_based --output-dir data/mcp_llm

Knobs (environment variable, or the matching flag, which wins): ``N_SAMPLES`` (valid questions wanted),
``OPENAI_MODEL``, ``OPENAI_BASE_URL``, ``MAX_TOOLS`` (most calls in one question; also ``limits.max_tools``),
``MAX_TURNS`` (``max_turns`` of every question), ``DOMAINS`` (bundled server names, comma-separated),
``COMPLEXITIES`` (``single``, ``multi_step``, ``cross_server``, comma-separated). The API key is read from
``OPENAI_API_KEY`` (a placeholder is sent when unset, which local servers accept) and is never printed.

One attempt:

1. Plan (seeded RNG): a complexity, its server(s) among ``DOMAINS``, the tool(s) to use (from the servers' real
   ``tools/list``), and values for their arguments (``llm_seeds.hint_pool``).
2. Ask the model, with two worked examples (``llm_seeds.SEED_TASKS``) as earlier chat turns, for one JSON object
   ``{"question", "calls": [{"tool", "arguments"}], "answer_field"}``. Small models follow demonstrations far
   better than instructions, and filling in given values is within reach of even the 135M default model.
3. Read the reply tolerantly (lenient JSON; if the object is broken, the question / answer field by pattern and
   the calls with ``skyrl_integrations.tool_parser``), and check each call's arguments against the tool schema.
4. Execute the calls on the servers. The question is kept only if every call succeeds, every identifier-like argument
   (ticker, date, user, URL) is visible to the agent (in the question or an earlier result), and the last result
   holds a short scalar answer: at ``answer_field`` when the question asks for it, else at the one field the
   question names ("opening price" -> ``open``); see ``_answer``. The expected answer is always that executed
   value, never text the model wrote.

Rejected attempts are counted by reason (``REJECTIONS``) and printed; attempts stop at ``--max-attempts``.
Measured with SmolLM2-135M-Instruct served by ``python -m skyrl_train.serve`` on the 2-core CPU box: about one
attempt in five gives a valid single-call question (market and search domains), ~30 s per attempt.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import re
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai

from skyrl_gym.common.progress import Progress
from skyrl_integrations.datasets.io import add_output_arguments, check_output_args, write_from_args
from skyrl_integrations.datasets.llm_seeds import SEED_TASKS, SeedTask, hint_pool
from skyrl_integrations.datasets.replay import ToolServers, answer_from_result, scalar_fields
from skyrl_integrations.datasets.schema import COMPLEXITIES, TaskRow, ToolStep, complexity_for, is_number
from skyrl_integrations.mcp.prompt import DEFAULT_ROLE, render_tools
from skyrl_integrations.mcp.servers import BUNDLED_SERVERS
from skyrl_integrations.tool_parser import ParseFailure, parse_tool_calls
from skyrl_integrations.tool_parser.lenient_json import decode_json_prefix

__all__ = [
    "ENV_VARS",
    "REJECTIONS",
    "GenerationReport",
    "LLMGenerationConfig",
    "LLMTaskGenerator",
    "TaskPlan",
    "parse_reply",
]

logger = logging.getLogger(__name__)

DEFAULT_ENDPOINT_MODEL = "smollm2-135m-instruct"
"""The name ``python -m skyrl_train.serve`` gives its default CPU model (``skyrl_train.models.DEFAULT_MODEL``, which
a serving test checks this against): a plain string, so that generating questions does not need skyrl-train."""

ENV_VARS = {
    "n_samples": "N_SAMPLES",
    "model": "OPENAI_MODEL",
    "base_url": "OPENAI_BASE_URL",
    "max_tools": "MAX_TOOLS",
    "max_turns": "MAX_TURNS",
    "domains": "DOMAINS",
    "complexities": "COMPLEXITIES",
}
"""Config field -> environment variable."""

REJECTIONS = (
    "api_error",  # the endpoint failed this request (5xx, timeout); refused connections abort the run
    "no_json",  # no question object in the reply
    "no_question",  # no usable question (missing, or too short)
    "wrong_call_count",  # fewer calls than planned
    "unknown_tool",  # a call to a tool the planned servers do not offer
    "invalid_arguments",  # arguments that do not fit the tool's schema
    "ungrounded_argument",  # an identifier-like argument the question (or an earlier result) never mentions
    "complexity_not_requested",  # the calls make a question of a complexity not in COMPLEXITIES
    "copied_example",  # the calls of a demonstration, unchanged
    "duplicate",  # the same question as an earlier one
    "tool_error",  # a call failed when executed
    "answer_not_asked",  # answer_field holds a value, but the question asks for something else
    "no_answer",  # no field of the last result is both a short scalar and what the question asks for
)

SIDE_EFFECT_TOOLS = ("post_message",)
"""Tools never offered: their results differ on every call, so a question built on them cannot be replayed."""

SYSTEM_PROMPT = (
    "You write practice tasks for an assistant that answers questions by calling tools. Given tools and argument "
    'values, reply with one JSON object on one line: {"question": <what a user asks, mentioning the values>, '
    '"calls": [{"tool": <tool name>, "arguments": {<argument>: <value>}}], "answer_field": <the field of the last '
    "call's result that holds the answer>}."
)
GENERIC_FIELDS = frozenset({"stdout", "result", "output", "value", "answer"})
"""Result fields that hold whatever was computed: a question need not name them ("Use Python to compute 2 ** 10")."""
MIN_QUESTION_WORDS = 3
MAX_PLANNED_CALLS = 3
# Argument values that look like identifiers (tickers, dates, handles, ids) must be visible to the agent.
_IDENTIFIER = re.compile(r"[A-Za-z0-9][\w.:/#@$+-]{0,39}")
_QUESTION = re.compile(r'"question"\s*:\s*("(?:[^"\\]|\\.)*")', re.S)
_ANSWER_FIELD = re.compile(r'"answer_field"\s*:\s*("(?:[^"\\]|\\.)*")', re.S)


class GenerationConfigError(ValueError):
    """A knob with a bad value; the message names the knob (environment variable and flag)."""


@dataclass(frozen=True)
class LLMGenerationConfig:
    """Every knob of the generator; ``from_env`` fills the ``ENV_VARS`` ones from the environment."""

    n_samples: int = 10
    """Valid questions wanted."""
    model: str = DEFAULT_ENDPOINT_MODEL
    """Model name sent to the endpoint (the default CPU model, as ``python -m skyrl_train.serve`` names it)."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible endpoint (``python -m skyrl_train.serve``'s default address)."""
    max_tools: int = 2
    """Most tool calls in one question; written as ``limits.max_tools``."""
    max_turns: int = 4
    """``max_turns`` of every question (at least one turn per call)."""
    domains: tuple[str, ...] = tuple(BUNDLED_SERVERS)
    """Bundled servers whose tools the questions use."""
    complexities: tuple[str, ...] = COMPLEXITIES
    """Question kinds to plan, picked uniformly per attempt."""
    max_attempts: int | None = None
    """Requests to make at most; None = 5 x n_samples."""
    temperature: float = 0.7
    max_tokens: int = 128
    """Reply length limit; a one-call question object is about 60 tokens."""
    concurrency: int = 1
    """Requests in flight at once. Raise it for servers that batch well (vLLM, hosted APIs); measured on the 2-core
    CPU box, ``skyrl_train.serve`` (hf engine) took 36 s for one 96-token reply and 334 s for four at once."""
    seed: int = 0
    """Seeds the plans and each request's sampling (``seed`` field), so a run can be repeated."""
    request_timeout_s: float = 300.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> LLMGenerationConfig:
        """Defaults, then the ``ENV_VARS`` set in ``environ`` (default ``os.environ``), then ``overrides`` (CLI
        flags; None values are ignored). Validated; errors name the variable."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, var in ENV_VARS.items():
            text = (environ.get(var) or "").strip()
            if not text:
                continue
            if name in ("domains", "complexities"):
                values[name] = split_list(text)
            elif name in ("model", "base_url"):
                values[name] = text
            else:
                try:
                    values[name] = int(text)
                except ValueError:
                    raise GenerationConfigError(f"{var}: expected an integer, got {text!r}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def __post_init__(self) -> None:
        def fail(name: str, message: str) -> GenerationConfigError:
            var = ENV_VARS.get(name)
            flag = "--" + name.replace("_", "-")
            return GenerationConfigError(f"{var + ' / ' if var else ''}{flag}: {message}")

        for name in ("n_samples", "max_tools", "max_turns", "max_tokens", "concurrency"):
            if getattr(self, name) < 1:
                raise fail(name, f"must be >= 1, got {getattr(self, name)}")
        unknown = [d for d in self.domains if d not in BUNDLED_SERVERS]
        if unknown or not self.domains:
            raise fail("domains", f"expected bundled server names ({', '.join(BUNDLED_SERVERS)}), got {unknown or []}")
        bad = [c for c in self.complexities if c not in COMPLEXITIES]
        if bad or not self.complexities:
            raise fail("complexities", f"expected some of {', '.join(COMPLEXITIES)}, got {bad or []}")
        if set(self.complexities) - {"single"} and self.max_tools < 2:
            raise fail("max_tools", "multi_step and cross_server questions need at least 2 calls")
        if "cross_server" in self.complexities and len(set(self.domains)) < 2:
            raise fail(
                "domains", "cross_server questions need at least two domains (or set COMPLEXITIES=single,multi_step)"
            )
        if self.max_turns < self.max_calls:
            raise fail("max_turns", f"must allow one turn per call: questions may have {self.max_calls} calls")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise fail("max_attempts", f"must be >= 1, got {self.max_attempts}")

    @property
    def attempt_budget(self) -> int:
        return self.max_attempts if self.max_attempts is not None else 5 * self.n_samples

    @property
    def max_calls(self) -> int:
        """Most calls a planned question has: 1 for single, up to 3 (within ``max_tools``) otherwise."""
        return 1 if set(self.complexities) == {"single"} else min(self.max_tools, MAX_PLANNED_CALLS)


def split_list(text: str) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")``."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class TaskPlan:
    """What one request asks for: the tools to call in order (with their servers) and suggested argument values."""

    attempt: int
    complexity: str
    steps: tuple[tuple[str, str], ...]
    """``(server, tool)`` per call."""
    values: dict[str, Any]
    demos: tuple[SeedTask, ...]

    @property
    def servers(self) -> list[str]:
        return list(dict.fromkeys(server for server, _ in self.steps))


@dataclass
class Candidate:
    """A parsed reply."""

    question: str
    calls: list[tuple[str, dict[str, Any]]]
    answer_field: str | None


@dataclass
class GenerationReport:
    tasks: list[TaskRow] = field(default_factory=list)
    attempts: int = 0
    rejected: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        lines = [f"generated {len(self.tasks)} valid question(s) in {self.attempts} attempt(s)"]
        lines += [f"  rejected {count:4d}  {reason}" for reason, count in self.rejected.most_common()]
        return "\n".join(lines)


class Rejected(Exception):
    """An attempt that did not give a valid question; ``reason`` is one of ``REJECTIONS``."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def parse_reply(text: str, tools: Sequence[Mapping[str, Any]]) -> Candidate:
    """The question in a model reply, read tolerantly; ``Rejected`` (``no_json`` / ``no_question``) if there is none.

    The first JSON object is decoded leniently; when it is broken (small models often add or drop a bracket), the
    question and answer field are found by pattern and the calls by the tool-call parser, which reads bare
    ``{"tool": ..., "arguments": {...}}`` objects.
    """
    data: Any = None
    start = text.find("{")
    if start >= 0:
        try:
            data, _ = decode_json_prefix(text, start)
        except ValueError:  # JSONRepairError included
            data = None
    if isinstance(data, Mapping) and isinstance(data.get("calls"), list):
        question = data.get("question")
        answer_field = data.get("answer_field")
        calls = [_raw_call(call) for call in data["calls"]]
        calls = [call for call in calls if call is not None]
    else:
        question = _pattern_string(_QUESTION, text)
        answer_field = _pattern_string(_ANSWER_FIELD, text)
        parsed = parse_tool_calls(text, list(tools))
        calls = [(call.name, dict(call.arguments)) for call in parsed.calls]
        if not calls and parsed.failure in (ParseFailure.UNKNOWN_TOOL, ParseFailure.INVALID_ARGUMENTS):
            raise Rejected(parsed.failure.value, parsed.error or "")
        if not calls and question is None:
            raise Rejected("no_json", text[:80])
    if not isinstance(question, str) or len(question.split()) < MIN_QUESTION_WORDS:
        raise Rejected("no_question", repr(question)[:80])
    if not isinstance(answer_field, str) or not answer_field.strip():
        answer_field = None
    return Candidate(question.strip(), calls, answer_field.strip() if answer_field else None)


def _raw_call(call: Any) -> tuple[str, dict[str, Any]] | None:
    if not isinstance(call, Mapping):
        return None
    name = call.get("tool") or call.get("name")
    arguments = call.get("arguments", call.get("params", {}))
    if not isinstance(name, str) or not isinstance(arguments, Mapping):
        return None
    return name, dict(arguments)


def _pattern_string(pattern: re.Pattern[str], text: str) -> str | None:
    match = pattern.search(text)
    if match is None:
        return None
    try:
        return json.loads(match.group(1))
    except json.JSONDecodeError:
        return None


class LLMTaskGenerator:
    """Plans requests, asks the model, validates by execution. ``run()`` returns a ``GenerationReport``.

    ``client`` is an ``openai.OpenAI`` client (built from the config when None); ``servers`` the ``ToolServers``
    to list tools from and execute on (the bundled ``domains`` when None, closed by ``close()``).
    """

    def __init__(
        self, config: LLMGenerationConfig, client: openai.OpenAI | None = None, servers: ToolServers | None = None
    ):
        self.config = config
        self.client = client if client is not None else _openai_client(config)
        self._own_servers = servers is None
        self.servers = servers if servers is not None else ToolServers.bundled(config.domains)
        self.tools = {
            server: [t for t in self.servers.list_tools(server) if t["name"] not in SIDE_EFFECT_TOOLS]
            for server in config.domains
        }
        self.tool_server = {t["name"]: server for server, tools in self.tools.items() for t in tools}
        self.seeds = [s for s in SEED_TASKS if all(tool in self.tool_server for tool in s.tools)]
        self.pool = hint_pool(self.seeds)
        self._seen: set[str] = set()

    # ------------------------------------------------------------------------------------------ planning

    def plan(self, attempt: int) -> TaskPlan:
        """The plan of attempt number ``attempt``: a function of the config's seed and ``attempt`` only."""
        rng = random.Random(f"{self.config.seed}:{attempt}")
        complexity = rng.choice(self.config.complexities)
        n_calls = 1 if complexity == "single" else rng.randint(2, self.config.max_calls)
        if complexity == "cross_server":
            servers = rng.sample(list(self.tools), 2)
            steps_servers = servers + [rng.choice(servers) for _ in range(n_calls - 2)]
        else:
            steps_servers = [rng.choice(list(self.tools))] * n_calls
        steps = tuple((server, rng.choice(self.tools[server])["name"]) for server in steps_servers)
        values: dict[str, Any] = {}
        for _, tool in steps:
            for name in self._schema(tool)["inputSchema"].get("properties") or {}:
                if name in self.pool and name not in values:
                    values[name] = rng.choice(self.pool[name])
        return TaskPlan(attempt, complexity, steps, values, self._demos(rng, complexity, steps, values))

    def _demos(
        self, rng: random.Random, complexity: str, steps: tuple[tuple[str, str], ...], values: Mapping[str, Any]
    ) -> tuple[SeedTask, ...]:
        """Two seeds: one with the plan's number of calls (preferring shared tools), one single-call seed; never a
        seed that the plan would reproduce (same tools, same values), which the model would just copy."""
        wanted = {tool for _, tool in steps}
        multi = complexity != "single"

        def reproduced(seed: SeedTask) -> bool:
            return all(tool in wanted and all(values.get(k) == v for k, v in a.items()) for tool, a in seed.calls)

        usable = [s for s in self.seeds if not reproduced(s)]
        first = [s for s in usable if (len(s.calls) > 1) == multi]
        second = [s for s in usable if len(s.calls) == 1]
        demos: list[SeedTask] = []
        for pool in (first, second):
            pool = [s for s in pool if s not in demos]
            if pool:
                best = max(len(wanted & set(s.tools)) for s in pool)
                demos.append(rng.choice([s for s in pool if len(wanted & set(s.tools)) == best]))
        return tuple(reversed(demos))  # the most similar demonstration last, right before the request

    def request_text(self, steps: Sequence[tuple[str, str]], values: Mapping[str, Any]) -> str:
        tools = [self._schema(tool) for _, tool in steps]
        text = render_tools(tools, "compact")
        if len(tools) > 1:
            text += "\nCall them in this order."
        shown = ", ".join(f"{name}={value}" for name, value in values.items())
        return text + (f"\nValues: {shown}" if shown else "")

    def messages(self, plan: TaskPlan) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}]
        for demo in plan.demos:
            demo_steps = [(self.tool_server[tool], tool) for tool in demo.tools]
            demo_values = {k: v for _, arguments in demo.calls for k, v in arguments.items()}
            messages.append({"role": "user", "content": self.request_text(demo_steps, demo_values)})
            messages.append({"role": "assistant", "content": json.dumps(demo.as_reply(), ensure_ascii=False)})
        messages.append({"role": "user", "content": self.request_text(plan.steps, plan.values)})
        return messages

    # -------------------------------------------------------------------------------------- validation

    def validate(self, plan: TaskPlan, reply: str) -> TaskRow:
        """The question a reply describes, executed and checked; ``Rejected`` with the reason otherwise."""
        schemas = [t for server in plan.servers for t in self.tools[server]]
        candidate = parse_reply(reply, schemas)
        calls = _drop_repeats(candidate.calls)
        if len(calls) < len(plan.steps):
            raise Rejected("wrong_call_count", f"{len(calls)} < {len(plan.steps)}")
        steps = [
            self._checked_step(i + 1, name, arguments, schemas)
            for i, (name, arguments) in enumerate(calls[: len(plan.steps)])
        ]
        if complexity_for(steps) not in self.config.complexities:
            raise Rejected("complexity_not_requested", complexity_for(steps))
        key = json.dumps([[s.tool, s.params] for s in steps], sort_keys=True)
        if any(key == json.dumps([[t, a] for t, a in demo.calls], sort_keys=True) for demo in plan.demos):
            raise Rejected("copied_example")
        identity = json.dumps([candidate.question.lower(), key])
        if identity in self._seen:
            raise Rejected("duplicate")
        results = self.servers.run(steps)
        if results[-1].is_error:
            raise Rejected("tool_error", f"{results[-1].error_kind}: {results[-1].text[:160]}")
        self._check_grounded(candidate.question, steps, [r.text for r in results])
        answer = _answer(candidate.question, candidate.answer_field, results[-1].text)
        self._seen.add(identity)
        return TaskRow(
            task_id=f"llm-{steps[0].server}-{hashlib.sha1(identity.encode()).hexdigest()[:10]}",
            system_prompt=DEFAULT_ROLE,
            user_prompt=candidate.question,
            tool_sequence=steps,
            expected_answer=answer,
            answer_match="numeric" if is_number(answer) else "contains",
            max_turns=self.config.max_turns,
            servers=plan.servers,
            tools=[t["name"] for t in schemas],
            max_tools=self.config.max_tools,
            extra={"generator": "llm_based", "model": self.config.model},
        )

    def _checked_step(self, step: int, name: str, arguments: dict[str, Any], schemas: list[dict]) -> ToolStep:
        """The call with its arguments checked (aliases resolved, types coerced) by the tool-call parser."""
        schema = next((t for t in schemas if t["name"] == name), None)
        if schema is None:
            raise Rejected("unknown_tool", name)
        text = json.dumps({"name": name, "arguments": arguments})
        parsed = parse_tool_calls(text, schemas)
        if not parsed.calls:
            reason = "unknown_tool" if parsed.failure == ParseFailure.UNKNOWN_TOOL else "invalid_arguments"
            raise Rejected(reason, parsed.error or "")
        known = (schema.get("inputSchema") or {}).get("properties") or {}
        unknown = sorted(set(parsed.calls[0].arguments) - set(known))
        if unknown:
            raise Rejected("invalid_arguments", f"{name} has no argument(s) {unknown}")
        return ToolStep(step, self.tool_server[name], name, dict(parsed.calls[0].arguments))

    @staticmethod
    def _check_grounded(question: str, steps: Sequence[ToolStep], results: Sequence[str]) -> None:
        """Each identifier-like string argument appears in the question or in an earlier call's result."""
        visible = question.lower()
        for i, step in enumerate(steps):
            for name, value in step.params.items():
                if isinstance(value, str) and _IDENTIFIER.fullmatch(value) and value.lower() not in visible:
                    raise Rejected("ungrounded_argument", f"{step.tool}.{name}={value!r}")
            visible += "\n" + results[i].lower()

    def _schema(self, tool: str) -> dict[str, Any]:
        return next(t for t in self.tools[self.tool_server[tool]] if t["name"] == tool)

    # -------------------------------------------------------------------------------------------- loop

    def ask(self, plan: TaskPlan) -> str:
        response = self.client.chat.completions.create(
            model=self.config.model,
            messages=self.messages(plan),
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            seed=self.config.seed * 1_000_003 + plan.attempt,
        )
        return response.choices[0].message.content or ""

    def run(self, log=None) -> GenerationReport:
        """Request in waves of ``concurrency`` until ``n_samples`` questions are valid or the budget is spent."""
        report = GenerationReport()
        budget = self.config.attempt_budget
        progress = Progress(self.config.n_samples, "generate questions", unit="question", logger=logger)
        with progress, ThreadPoolExecutor(self.config.concurrency) as pool:
            while len(report.tasks) < self.config.n_samples and report.attempts < budget:
                wave = min(self.config.concurrency, budget - report.attempts)
                plans = [self.plan(report.attempts + i) for i in range(wave)]
                futures = [pool.submit(self.ask, plan) for plan in plans]
                for plan, future in zip(plans, futures, strict=True):
                    report.attempts += 1
                    try:
                        reply = future.result()
                    except openai.APITimeoutError as exc:
                        report.rejected["api_error"] += 1
                        _log(log, f"attempt {plan.attempt}: api_error: {exc}")
                        continue
                    except (openai.APIConnectionError, openai.AuthenticationError, openai.NotFoundError) as exc:
                        endpoint = _without_userinfo(self.config.base_url)
                        raise RuntimeError(f"the endpoint {endpoint} refused the request: {exc}") from None
                    except openai.APIError as exc:
                        report.rejected["api_error"] += 1
                        _log(log, f"attempt {plan.attempt}: api_error: {exc}")
                        continue
                    if len(report.tasks) >= self.config.n_samples:
                        continue
                    try:
                        report.tasks.append(self.validate(plan, reply))
                        progress.advance()
                        _log(log, f"attempt {plan.attempt}: valid: {report.tasks[-1].user_prompt!r}")
                    except Rejected as exc:
                        report.rejected[exc.reason] += 1
                        _log(log, f"attempt {plan.attempt}: {exc}")
        return report

    def close(self) -> None:
        if self._own_servers:
            self.servers.close()

    def __enter__(self) -> LLMTaskGenerator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _answer(question: str, answer_field: str | None, result: str) -> str:
    """The expected answer, always a value of the executed result. Which value:

    1. the model's ``answer_field`` when the question asks for that field (or it is generic, like ``stdout``);
    2. else the one field of the result the question names ("opening price" -> ``open``);
    3. else the model's ``answer_field`` when the question names no field at all ("the price of X" -> ``close``);
    4. else the whole result when it is a scalar.

    ``Rejected``: ``answer_not_asked`` when the question names other fields than ``answer_field``, ``no_answer``
    when nothing applies.
    """
    chosen = answer_from_result(result, answer_field) if answer_field else None
    if chosen is not None and (_leaf(answer_field) in GENERIC_FIELDS or _asks_for(question, answer_field)):
        return chosen
    fields = scalar_fields(result)
    asked = [path for path in fields if _asks_for(question, path)]
    if len(asked) == 1:
        return fields[asked[0]]
    if chosen is not None:
        if asked:
            raise Rejected("answer_not_asked", f"field {answer_field!r}, but the question names {asked}")
        return chosen
    value = None if fields else answer_from_result(result, None)
    if value is None:
        raise Rejected("no_answer", f"field {answer_field!r}, question names {asked or 'no field'}")
    return value


def _leaf(path: str) -> str:
    return next((part for part in reversed(path.split(".")) if not part.isdigit()), path).lower()


def _asks_for(question: str, path: str) -> bool:
    """Whether the question names the field: a word of it (``revenue_usd_millions``: revenue, usd, millions; at
    least 3 letters) begins, by its first 4 letters, a word of the question (``close`` ~ "closing")."""
    words = re.findall(r"[a-z0-9]+", question.lower())
    return any(
        word.startswith(part[:4]) for part in re.split(r"[^a-z0-9]+", _leaf(path)) if len(part) >= 3 for word in words
    )


def _drop_repeats(calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Calls without immediate repeats (small models often write the same call twice)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for call in calls:
        if not out or out[-1] != call:
            out.append(call)
    return out


def _log(log, message: str) -> None:
    if log is not None:
        log(message)


def _without_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (credentials never reach the logs)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _openai_client(config: LLMGenerationConfig) -> openai.OpenAI:
    # Local OpenAI-compatible servers ignore the key; the SDK insists on one.
    api_key = os.environ.get("OPENAI_API_KEY") or "unused"
    return openai.OpenAI(base_url=config.base_url, api_key=api_key, timeout=config.request_timeout_s, max_retries=1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_integrations.datasets.llm_based", description=__doc__.split("\n\n")[0]
    )
    add_output_arguments(parser)
    parser.add_argument("--n-samples", type=int, help="valid questions wanted (env N_SAMPLES; default 10)")
    parser.add_argument("--model", help="model name sent to the endpoint (env OPENAI_MODEL)")
    parser.add_argument(
        "--base-url", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (env OPENAI_BASE_URL)"
    )
    parser.add_argument("--max-tools", type=int, help="most calls per question, and limits.max_tools (env MAX_TOOLS)")
    parser.add_argument("--max-turns", type=int, help="max_turns of every question (env MAX_TURNS)")
    parser.add_argument("--domains", help="bundled servers, comma-separated (env DOMAINS)")
    parser.add_argument("--complexities", help="single,multi_step,cross_server (env COMPLEXITIES)")
    parser.add_argument("--max-attempts", type=int, help="requests to make at most (default 5 x n-samples)")
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--max-tokens", type=int, help="reply length limit per request")
    parser.add_argument("--concurrency", type=int, help="requests in flight at once")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--verbose", action="store_true", help="print every attempt's outcome")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the progress lines, without a terminal
    overrides = {
        name: getattr(args, name)
        for name in ("n_samples", "model", "base_url", "max_tools", "max_turns", "max_attempts", "temperature")
        + ("max_tokens", "concurrency", "seed")
    }
    for name in ("domains", "complexities"):
        value = getattr(args, name)
        overrides[name] = split_list(value) if value else None
    try:
        config = LLMGenerationConfig.from_env(**overrides)
        check_output_args(args)
    except ValueError as exc:  # GenerationConfigError, DatasetWriteError
        parser.error(str(exc))
    print(
        f"generating {config.n_samples} question(s) with {config.model!r} at {_without_userinfo(config.base_url)}",
        flush=True,
    )
    with LLMTaskGenerator(config) as generator:
        report = generator.run(log=(lambda m: print(m, flush=True)) if args.verbose else None)
    print(report.summary())
    if not report.tasks:
        print("error: no valid question was generated; nothing written", file=sys.stderr)
        return 1
    for path in write_from_args(report.tasks, args).values():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
