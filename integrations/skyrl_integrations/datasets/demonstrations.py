"""Demonstrations made by the environment itself: a scripted solver plays training questions through the real MCP env
and servers, and each episode is written as the generator saw it, for a supervised warm start before RL.

    python -m skyrl_integrations.datasets.demonstrations --data DATA/train.parquet --output DATA/warm_start.jsonl \\
        --env-config '{"max_calls_per_turn": 1, "last_turn_note": ""}' --max-turns 3 --recovery-fraction 0.25

An episode runs as the generator runs one (`skyrl_train.generators.env_runner`): ``skyrl_gym.make("mcp_tool",
env_config=<--env-config>, extras=<the row but its prompt and env_class, with max_turns=--max-turns>)``, ``init`` on
the row's prompt as it is (a hinted question keeps its hint), then one ``step`` per reply. The replies follow the row's
recipe, its ``reward_spec.ground_truth`` as the env parses it: each ``tool_sequence`` step's call with its ``params``,
one call per reply in the env's call format (`prompt.call_text`), then ``success.expected_answer`` as the final reply.
The only argument a row leaves out that the solver writes is ``search_tickers``'s query: the company name the question
writes (``extra_info.entity_text``). A row the solver cannot play so (another free-text argument, no expected answer,
fewer turns than calls and an answer, not a training question, another env) stops the run with an error naming the
row, before any episode runs.

Error-and-recovery episodes first make a plausible mistake that the server refuses (`MISTAKES`, by the recipe's first
tool), read the error, then follow the recipe. ``--recovery-fraction`` of the episodes played (to the nearest whole
number) are such episodes, on rows whose recipe has a mistake and a turn to spare for it (too few such rows is an
error); the others play the recipe alone. ``--limit`` plays the first rows with the templates taking turns.
``--exclude`` names questions the run trains or evaluates on (its ``data.train_data`` and ``data.val_data``): rows with
one of their task ids are not played, so that the warm start does not hand RL the answers to its own questions (whose
groups would then all score 1.0 and carry no signal). A mistake that the server does not refuse, or a recipe call that
it does, is an error naming the row. Only episodes the env scores 1.0 are written; any other is left out and named on
stderr.

Each line of the output is one episode::

    {"prompt": [...], "completion": [...], "task_id": "market-price_field-48d2fc690f", "template": "price_field",
     "kind": "plain"}

TRL's conversational prompt-completion form: ``prompt`` is what ``init`` returned (the system message, the env's
demonstrations, the question), as the generator's prompt; ``completion`` is each reply as an ``assistant`` message
followed by the observation messages its step returned, unchanged, up to the final answer. ``kind`` is ``plain`` or
``recovery``; a recovery episode's deliberate mistake carries ``"weight": 0``, the OpenAI fine-tuning format's mark of
a message not to train on (`skyrl_train.sft` reads both).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import skyrl_gym
from skyrl_gym.common.fs import atomic_write_text
from skyrl_integrations.datasets.io import read_rows
from skyrl_integrations.datasets.rule_based import FREE_TEXT_ARGUMENTS
from skyrl_integrations.datasets.schema import ENV_CLASS
from skyrl_integrations.mcp.prompt import call_text

__all__ = ["MISTAKES", "DemonstrationError", "Plan", "main", "make_demonstrations", "plan_rows", "task_ids"]

DEFAULT_RECOVERY_FRACTION = 0.25
Call = tuple[str, dict[str, Any]]
"""A tool name and its arguments."""


class DemonstrationError(ValueError):
    """A row the solver cannot play, or an episode that did not go as its recipe says; the message names the row."""


# ----------------------------------------------------------------------------------------------------- mistakes


def _ticker_as_company_name(calls: Sequence[Call], entity: str | None) -> Call | None:
    """``search_tickers`` then a call that takes the ticker found: skip the search and pass the company name as the
    ticker. The server answers "Unknown ticker: search_tickers finds tickers by company name"."""
    if len(calls) < 2 or "ticker" not in calls[1][1] or not entity:
        return None
    tool, arguments = calls[1]
    return tool, {**arguments, "ticker": entity}


def _crypto_tool_for_a_stock(calls: Sequence[Call], entity: str | None) -> Call | None:
    """``get_stock_price``: the crypto price tool (the main job's demonstrations show it) with the ticker as the
    symbol. The server answers "Not a crypto symbol but a stock ticker: get_stock_price gives stock prices"."""
    arguments = calls[0][1]
    if "ticker" not in arguments or "date" not in arguments:
        return None
    return "get_crypto_price", {"symbol": arguments["ticker"], "date": arguments["date"]}


def _period_as_a_date(calls: Sequence[Call], entity: str | None) -> Call | None:
    """``get_financials``: ``get_stock_price`` with the period as the date. The server answers "Invalid date
    '2024-Q3': that is a period, not a day; get_financials takes periods"."""
    arguments = calls[0][1]
    if "ticker" not in arguments or "period" not in arguments:
        return None
    return "get_stock_price", {"ticker": arguments["ticker"], "date": arguments["period"]}


def _price_on_the_last_day(calls: Sequence[Call], entity: str | None) -> Call | None:
    """``get_price_history``: ``get_stock_price`` on the range's last day when that is a Saturday or a Sunday (the
    server answers "No trading on 2024-08-31 (a Saturday): get_price_history lists the trading days of a date
    range"), else on its month without a day ("Invalid date '2024-04': use YYYY-MM-DD, e.g. 2024-03-15")."""
    arguments = calls[0][1]
    if "ticker" not in arguments or "end_date" not in arguments:
        return None
    end = str(arguments["end_date"])
    weekend = dt.date.fromisoformat(end).weekday() >= 5
    return "get_stock_price", {"ticker": arguments["ticker"], "date": end if weekend else end[:7]}


MISTAKES: dict[str, Callable[[Sequence[Call], str | None], Call | None]] = {
    "search_tickers": _ticker_as_company_name,
    "get_stock_price": _crypto_tool_for_a_stock,
    "get_financials": _period_as_a_date,
    "get_price_history": _price_on_the_last_day,
}
"""The first tool of a recipe -> its mistake, from the recipe's calls and the entity as the question writes it (None:
no mistake fits the calls). Each is of a kind the untrained model makes: the company name where the ticker goes
(docs/results.md, "What the untrained model does"), the period as a date (run J3 in docs/journal/main-job.md),
`get_stock_price` for anything priced or a demonstration's tool (learnings/main-job-tool-choice.md). Each error names
the tool that finds the value, never the value."""


# --------------------------------------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class Plan:
    """What the solver replies to one row."""

    where: str
    """The row, as errors name it: ``<file>: row <index> (<task id>)``."""
    row: Mapping[str, Any]
    task_id: str
    template: str
    calls: tuple[Call, ...]
    answer: str
    mistake: Call | None
    """The mistake a recovery episode starts with; None when none fits or no turn is left for it."""


def plan_rows(
    rows: Sequence[Mapping[str, Any]], source: str, env_config: Mapping[str, Any], max_turns: int | None
) -> list[Plan]:
    """A plan per row; the first row the solver cannot play raises `DemonstrationError`."""
    return [plan_row(row, f"{source}: row {index}", env_config, max_turns) for index, row in enumerate(rows)]


def plan_row(row: Mapping[str, Any], where: str, env_config: Mapping[str, Any], max_turns: int | None) -> Plan:
    """The calls, answer and mistake of one row, read from its ground truth as the env parses it."""
    info = row.get("extra_info") or {}
    if info.get("split") != "train":
        raise DemonstrationError(
            f"{where}: extra_info.split is {info.get('split')!r}: demonstrations come from training questions only"
        )
    env_class = row.get("env_class") or ENV_CLASS
    if env_class != ENV_CLASS:
        raise DemonstrationError(f"{where}: env_class {env_class!r}: the solver plays {ENV_CLASS!r} rows only")
    env = _make_env(row, where, env_config, max_turns)
    truth, turns = env.ground_truth, env.max_turns
    env.close()
    where = f"{where} ({truth.task_id})"
    entity = info.get("entity_text")
    calls = tuple((step.tool, _arguments(step, entity, where)) for step in truth.tool_sequence)
    if not calls or truth.expected_answer is None:
        raise DemonstrationError(
            f"{where}: the ground truth needs a tool_sequence and success.expected_answer for the solver to play it"
        )
    if len(calls) + 1 > turns:
        raise DemonstrationError(f"{where}: {len(calls)} calls and an answer do not fit in max_turns={turns}")
    make_mistake = MISTAKES.get(calls[0][0])
    mistake = make_mistake(calls, entity) if make_mistake is not None and len(calls) + 2 <= turns else None
    template = str(info.get("template") or row.get("data_source"))
    return Plan(where, row, str(truth.task_id), template, calls, truth.expected_answer, mistake)


def task_ids(rows: Sequence[Mapping[str, Any]], source: str) -> set[str]:
    """The task ids of `rows` (any split), from their ground truth as the env parses it."""
    ids = set()
    for index, row in enumerate(rows):
        env = _make_env(row, f"{source}: row {index}", {}, None)
        ids.add(str(env.ground_truth.task_id))
        env.close()
    return ids


def _arguments(step: Any, entity: str | None, where: str) -> dict[str, Any]:
    """A step's arguments: its ``params``, and for ``search_tickers`` the company name as the query."""
    arguments = dict(step.params)
    free = FREE_TEXT_ARGUMENTS.get((step.server, step.tool), frozenset())
    if (step.server, step.tool) == ("market", "search_tickers"):
        if not entity:
            raise DemonstrationError(f"{where}: step {step.step} searches tickers, but extra_info.entity_text is unset")
        arguments["query"] = entity
    elif free - set(arguments):
        raise DemonstrationError(
            f"{where}: step {step.step} ({step.server}.{step.tool}) leaves {sorted(free - set(arguments))} to the "
            "agent's own wording; the solver writes only search_tickers' query (the company name)"
        )
    return arguments


def _make_env(row: Mapping[str, Any], where: str, env_config: Mapping[str, Any], max_turns: int | None) -> Any:
    """The env the generator makes for `row` (extras: every column but the prompt and the env class)."""
    extras = {key: value for key, value in row.items() if key not in ("prompt", "env_class")}
    if max_turns is not None:
        extras["max_turns"] = max_turns
    try:
        return skyrl_gym.make(ENV_CLASS, env_config=dict(env_config), extras=extras)
    except ValueError as exc:
        raise DemonstrationError(f"{where}: {exc}") from None


# ------------------------------------------------------------------------------------------------------ episodes


def run_episode(plan: Plan, env_config: Mapping[str, Any], max_turns: int | None, recover: bool) -> dict[str, Any]:
    """One episode of `plan` through a fresh env (with its mistake first when `recover`): ``{"prompt", "completion",
    "reward"}``."""
    env = _make_env(plan.row, plan.where, env_config, max_turns)
    try:
        opening, _ = env.init(copy.deepcopy(list(plan.row["prompt"])))
        messages: list[dict[str, Any]] = []
        replies = [(plan.mistake, True)] if recover else []
        for (tool, arguments), mistaken in [*replies, *((call, False) for call in plan.calls)]:
            text = call_text(tool, arguments)
            step = env.step(text)
            ran = step["metadata"].get("tool_calls") or []
            if len(ran) != 1 or (ran[0]["error_kind"] is not None) != mistaken or step["done"]:
                what = "the mistake" if mistaken else "the recipe's call"
                observation = [m["content"] for m in step["observations"]]
                raise DemonstrationError(
                    f"{plan.where}: {what} {text} {'ran' if mistaken else 'failed'}"
                    f"{' and ended the episode' if step['done'] else ''}: {observation}"
                )
            messages.append({**_reply(text), "weight": 0} if mistaken else _reply(text))
            messages += [dict(m) for m in step["observations"]]
        final = env.step(plan.answer)
        messages.append(_reply(plan.answer))
        return {"prompt": [dict(m) for m in opening], "completion": messages, "reward": float(final["reward"])}
    finally:
        env.close()


def _reply(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def make_demonstrations(
    plans: Sequence[Plan],
    env_config: Mapping[str, Any],
    max_turns: int | None,
    *,
    recovery_fraction: float = DEFAULT_RECOVERY_FRACTION,
    limit: int | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """One episode per plan, the templates taking turns (the first `limit` of that order); the nearest whole number
    to `recovery_fraction` of them are recovery episodes, the first plans of that order with a mistake. Episodes
    the env scores below 1.0 are left out (and `log`ged)."""
    if not 0.0 <= recovery_fraction <= 1.0:
        raise DemonstrationError(f"recovery_fraction must be between 0 and 1, got {recovery_fraction}")
    chosen = _interleaved(plans)[:limit]
    wanted = math.floor(recovery_fraction * len(chosen) + 0.5)
    fitting = [plan for plan in chosen if plan.mistake is not None]
    if len(fitting) < wanted:
        raise DemonstrationError(
            f"recovery_fraction {recovery_fraction} asks for {wanted} recovery episodes of {len(chosen)}, but only "
            f"{len(fitting)} rows have a mistake and a turn to spare for it (max_turns: --max-turns or the row's)"
        )
    recovering = {id(plan) for plan in fitting[:wanted]}
    episodes = []
    for plan in chosen:
        kind = "recovery" if id(plan) in recovering else "plain"
        episode = run_episode(plan, env_config, max_turns, recover=kind == "recovery")
        if episode["reward"] < 1.0:
            log(f"left out: {plan.where}: the {kind} episode scored {episode['reward']}")
            continue
        episodes.append(
            {
                "prompt": episode["prompt"],
                "completion": episode["completion"],
                "task_id": plan.task_id,
                "template": plan.template,
                "kind": kind,
            }
        )
    return episodes


def _interleaved(plans: Sequence[Plan]) -> list[Plan]:
    """The plans with the templates taking turns (in the order each first appears), each template's in row order."""
    by_template: dict[str, list[Plan]] = {}
    for plan in plans:
        by_template.setdefault(plan.template, []).append(plan)
    queues = list(by_template.values())
    return [queue[i] for i in range(max(map(len, queues), default=0)) for queue in queues if i < len(queue)]


# ----------------------------------------------------------------------------------------------------------- CLI


def _env_config(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_integrations.datasets.demonstrations", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data", type=Path, required=True, help="training questions (.parquet or .jsonl)")
    parser.add_argument("--output", type=Path, required=True, help="the demonstrations, JSON Lines")
    parser.add_argument(
        "--env-config",
        type=_env_config,
        default={},
        help="the run's environment.skyrl_gym.mcp_tool block as a JSON object (default: the env's defaults)",
    )
    parser.add_argument(
        "--max-turns", type=int, default=None, help="the run's generator.max_turns (default: the row's)"
    )
    parser.add_argument(
        "--exclude",
        type=Path,
        action="append",
        default=[],
        help="questions not to play (rows with one of their task ids), e.g. the run's training and eval data; "
        "repeatable",
    )
    parser.add_argument("--limit", type=int, default=None, help="at most this many episodes (default: one per row)")
    parser.add_argument(
        "--recovery-fraction",
        type=float,
        default=DEFAULT_RECOVERY_FRACTION,
        help=f"share of the episodes that make a mistake and recover (default {DEFAULT_RECOVERY_FRACTION})",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        if args.output.exists() and not args.overwrite:
            raise DemonstrationError(f"{args.output} exists; pass --overwrite to replace it")
        if args.limit is not None and args.limit < 1:
            raise DemonstrationError(f"--limit must be >= 1, got {args.limit}")
        rows = read_rows(args.data, "skyrl_integrations.datasets.demonstrations")
        plans = plan_rows(rows, str(args.data), args.env_config, args.max_turns)
        excluded = {
            task_id
            for path in args.exclude
            for task_id in task_ids(read_rows(path, "skyrl_integrations.datasets.demonstrations"), str(path))
        }
        plans = [plan for plan in plans if plan.task_id not in excluded]
        if not plans:
            raise DemonstrationError(f"every row of {args.data} is in {', '.join(map(str, args.exclude))}")
        episodes = make_demonstrations(
            plans,
            args.env_config,
            args.max_turns,
            recovery_fraction=args.recovery_fraction,
            limit=args.limit,
            log=lambda line: print(line, file=sys.stderr),
        )
    except DemonstrationError as exc:
        print(f"demonstrations: error: {exc}", file=sys.stderr)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.output, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in episodes))
    counts = Counter((e["template"], e["kind"]) for e in episodes)
    per_template = ", ".join(
        f"{template} {counts[template, 'plain']}+{counts[template, 'recovery']}"
        for template in dict.fromkeys(e["template"] for e in episodes)
    )
    print(
        f"wrote {len(episodes)} episodes to {args.output} in {time.monotonic() - started:.1f}s "
        f"(plain+recovery per template: {per_template})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
