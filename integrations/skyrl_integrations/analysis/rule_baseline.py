"""The best question-agnostic rules on a held-out set: what an agent scores without reading what a question asks.

    python -m skyrl_integrations.analysis.rule_baseline VALIDATION.parquet [--json rule_baseline.json]

A rule sees only what any question states: the entity as the question writes it (the row's
``extra_info.entity_text``: a ticker or a company name), the question's first ISO date and its first period
(``2024-Q3``, ``FY2024``). It never reads which field, tool or day the question wants. A rule is

1. a fixed tool sequence (`SEQUENCES`: one tool, or ``search_tickers`` then a tool with the first ticker found), each
   tool's arguments filled from those facts by name (ticker/symbol/query: the entity; date, start_date, end_date:
   the date; period: the period);
2. following any error: when a tool error names a tool, that tool is called next (``search_tickers`` with the
   entity, after which the failed tool is retried with the first ticker found), while turns are left;
3. a fixed answer (`ANSWERS`): one field of the last tool output, or its first or last number.

Every episode's calls run through `MCPToolEnv` against the real MCP server, and each answer is scored by the env's
own scoring of that episode (`scoring.score_episode`), so nothing of the grading is re-implemented here. Printed per template and entity split (``extra_info.entity_split``): the best rule for that group and its
success; then per split the best single rule for all templates together. ``--json`` writes the same for
``skyrl-analyze-evals --rule-baseline``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from skyrl_gym.common.fs import atomic_write_text
from skyrl_integrations.datasets.io import read_rows
from skyrl_integrations.mcp.prompt import call_text
from skyrl_integrations.mcp.scoring import ISO_DATE, EpisodeRecord, numbers_in, score_episode

FIELDS = ("open", "high", "low", "close", "volume", "revenue_usd_millions", "net_income_usd_millions", "eps")
ANSWERS = (*FIELDS, "first number", "last number")
FIRST_TOOLS = ("get_stock_price", "get_price_history", "get_crypto_price", "get_company_profile", "get_financials")
SEQUENCES: tuple[tuple[str, ...], ...] = (
    *((tool,) for tool in FIRST_TOOLS),
    ("search_tickers",),
    *(("search_tickers", tool) for tool in FIRST_TOOLS),
)
ENV_CONFIG = {"max_calls_per_turn": 1, "last_turn_note": ""}
"""The main job's env settings that change what a scripted agent sees (success does not depend on reward weights)."""
ALL = "all"
"""The entity split of rows without ``extra_info.entity_split``."""
_PERIOD = re.compile(r"\b(?:\d{4}-Q[1-4]|FY\d{4})\b")
_ENTITY_ARGUMENTS = ("ticker", "symbol", "query")
_DATE_ARGUMENTS = ("date", "start_date", "end_date")
_RESULT = re.compile(r"^Tool result \((\w+)\):\n(.*)$", re.MULTILINE)
"""A call that ran: the tool's output is one line of compact JSON (the bundled servers' `to_json`)."""


class BaselineError(ValueError):
    """A row the rules cannot be run on; the message names the row and the key."""


@dataclass(frozen=True)
class Rule:
    tools: tuple[str, ...]
    answer: str

    @property
    def name(self) -> str:
        return f"{' -> '.join(self.tools)}, follow errors, answer {self.answer}"


RULES = tuple(Rule(tools, answer) for tools in SEQUENCES for answer in ANSWERS)


@dataclass(frozen=True)
class Facts:
    """What a question-agnostic rule may use: the entity as written, the first date and period of the question."""

    entity: str
    date: str | None
    period: str | None

    @classmethod
    def of(cls, row: Mapping[str, Any], where: str) -> Facts:
        entity = (row.get("extra_info") or {}).get("entity_text")
        if not isinstance(entity, str) or not entity:
            raise BaselineError(
                f"{where}: extra_info.entity_text is missing (rows of templates that hold entities out)"
            )
        question = row["prompt"][-1]["content"]
        date, period = ISO_DATE.search(question), _PERIOD.search(question)
        return cls(entity, date and date.group(0), period and period.group(0))


class _Episode:
    """One rule's episode: drives the env turn by turn and keeps the last tool output that worked."""

    def __init__(self, env: Any, facts: Facts) -> None:
        self.env = env
        self.facts = facts
        self.schemas = {tool["name"]: tool.get("inputSchema", {}).get("properties", {}) for tool in env.tools}
        self.output: str | None = None
        self.done = False
        self.success = False

    @property
    def turns_left(self) -> int:
        return self.env.max_turns - self.env.turns

    def call(self, tool: str, entity: str) -> str | None:
        """Call ``tool`` (arguments from the facts, ``entity`` as the ticker); the observation without its
        ``Tool error (tool):`` label when it failed, None when it ran."""
        arguments = self._arguments(tool, entity)
        observation = self._step(call_text(tool, arguments))
        result = _RESULT.match(observation)
        if result is not None:
            self.output = result.group(2)
            return None
        return observation.removeprefix(f"Tool error ({tool}): ")

    def call_following_errors(self, tool: str, entity: str) -> str:
        """Call ``tool``, then whatever tool each error names, keeping a turn to answer; returns the entity in use."""
        error = self.call(tool, entity)
        while error is not None and not self.done and self.turns_left > 1:
            named = _first_tool_named(error, self.schemas)
            if named is None:
                break
            if named == "search_tickers":
                entity = self.search(self.facts.entity) or entity
                if self.done or self.turns_left <= 1:
                    break
                named = tool
            error = self.call(named, entity)
        return entity

    def search(self, query: str) -> str | None:
        """The first ticker ``search_tickers`` finds for ``query`` (None: no result or an error)."""
        if self.call("search_tickers", query) is not None or self.output is None:
            return None
        results = json.loads(self.output).get("results") or []
        return results[0]["ticker"] if results else None

    def _arguments(self, tool: str, entity: str) -> dict[str, str]:
        values = {name: entity for name in _ENTITY_ARGUMENTS}
        values |= {name: self.facts.date for name in _DATE_ARGUMENTS} | {"period": self.facts.period}
        return {name: values[name] for name in self.schemas.get(tool, {}) if values.get(name) is not None}

    def _step(self, action: str) -> str:
        step = self.env.step(action)
        self.done = bool(step["done"])
        if self.done:
            self.success = bool(step["metadata"].get("success"))
        return "\n".join(message["content"] for message in step["observations"])


def _first_tool_named(error: str, tools: Iterable[str]) -> str | None:
    positions = [(error.find(tool), tool) for tool in tools if tool in error]
    return min(positions)[1] if positions else None


def _answer_text(how: str, output: str | None) -> str:
    """The final reply of answer rule ``how`` for the last tool output (``output``: JSON text, or None)."""
    if output is None:
        return "I could not find it."
    if how in FIELDS:
        value = _field(json.loads(output), how)
        return "I could not find it." if value is None else str(value)
    numbers = numbers_in(ISO_DATE.sub(" ", output))
    if not numbers:
        return "I could not find it."
    return repr(numbers[0] if how == "first number" else numbers[-1])


def _field(output: Any, key: str) -> Any:
    """``output[key]``, or for a list of records (a price history) the last record's."""
    if isinstance(output, Mapping) and key in output:
        return output[key]
    records = output.get("results") if isinstance(output, Mapping) else None
    if isinstance(records, list) and records and isinstance(records[-1], Mapping):
        return records[-1].get(key)
    return None


def run_sequence(tools: Sequence[str], row: Mapping[str, Any], where: str = "row") -> dict[str, bool]:
    """Answer rule -> whether the rule of tool sequence ``tools`` and that answer answers ``row`` right.

    The calls run once through the env; each answer is then scored on the same episode with the env's own scoring
    (`scoring.score_episode` of the env's ground truth, calls and weights), as the env would score that reply."""
    from skyrl_integrations.mcp.env import MCPToolEnv

    facts = Facts.of(row, where)
    env = MCPToolEnv(ENV_CONFIG, row)
    try:
        env.init(row["prompt"])
        episode = _Episode(env, facts)
        entity = facts.entity
        for tool in tools:
            if episode.done or episode.turns_left <= 1:
                break
            if tool == "search_tickers":
                entity = episode.search(facts.entity) or entity
            else:
                entity = episode.call_following_errors(tool, entity)
        if episode.done:  # the turns ran out before an answer
            return {answer: episode.success for answer in ANSWERS}
        calls = tuple(env.calls)
        return {
            answer: score_episode(
                env.ground_truth, EpisodeRecord(calls, _answer_text(answer, episode.output)), env.config.reward_weights
            ).success
            for answer in ANSWERS
        }
    finally:
        env.close()


def group_of(row: Mapping[str, Any]) -> tuple[str, str]:
    """``(template, entity split)`` of a row."""
    info = row.get("extra_info") or {}
    return str(info.get("template", row.get("data_source"))), str(info.get("entity_split", ALL))


def score_rules(rows: Sequence[Mapping[str, Any]], rules: Sequence[Rule] = RULES) -> dict[str, Any]:
    """Every rule on every row, summarised: per (template, split) the best rule, per split the best single rule."""
    by_sequence = {
        tools: [run_sequence(tools, row, f"row {i}") for i, row in enumerate(rows)]
        for tools in dict.fromkeys(rule.tools for rule in rules)
    }
    outcomes = {rule.name: [answers[rule.answer] for answers in by_sequence[rule.tools]] for rule in rules}
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        groups[group_of(row)].append(i)
    per_group: dict[str, dict[str, Any]] = {template: {} for template, _ in sorted(groups)}
    for (template, split), indices in sorted(groups.items()):
        per_group[template][split] = _best(outcomes, indices)
    overall = {}
    for split in sorted({split for _, split in groups}):
        indices = [i for (_, s), members in groups.items() if s == split for i in members]
        best = _best(outcomes, indices)
        best["per_template"] = {
            template: fmean(outcomes[best["rule"]][i] for i in members)
            for (template, s), members in sorted(groups.items())
            if s == split
        }
        overall[split] = best
    return {"rules": len(rules), "rows": len(rows), "templates": per_group, "overall": overall}


def _best(outcomes: dict[str, list[bool]], indices: list[int]) -> dict[str, Any]:
    """The rule with the highest success on ``indices`` (the first in `RULES` order on ties)."""
    scores = {name: fmean(results[i] for i in indices) for name, results in outcomes.items()}
    name = max(scores, key=scores.get)
    return {"rule": name, "success": scores[name], "questions": len(indices)}


def format_baseline(summary: Mapping[str, Any]) -> str:
    lines = [f"Best question-agnostic rule ({summary['rules']} rules, {summary['rows']} questions):"]
    for template, splits in summary["templates"].items():
        for split, best in splits.items():
            lines.append(f"  {template} [{split}]: {best['success']:.3f} of {best['questions']}  ({best['rule']})")
    for split, best in summary["overall"].items():
        lines.append(f"  overall [{split}]: {best['success']:.3f} of {best['questions']}  ({best['rule']})")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_integrations.analysis.rule_baseline", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "dataset", type=Path, help="held-out questions (.parquet or .jsonl) of the rule-based generator"
    )
    parser.add_argument(
        "--json", type=Path, help="write the summary here (read by skyrl-analyze-evals --rule-baseline)"
    )
    args = parser.parse_args(argv)
    try:
        summary = score_rules(read_rows(args.dataset, "skyrl_integrations.analysis.rule_baseline"))
    except BaselineError as exc:
        print(f"rule_baseline: error: {args.dataset}: {exc}", file=sys.stderr)
        return 1
    print(format_baseline(summary), end="")
    if args.json is not None:
        atomic_write_text(args.json, json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
