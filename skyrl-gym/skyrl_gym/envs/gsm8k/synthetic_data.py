"""Deterministic synthetic arithmetic word problems in the SkyRL dataset format (for the `gsm8k` envs).

A problem is a start value and 1-3 integer operations, told as a short story from one of several
themes. Every intermediate value is an integer (divisions are exact) and, unless negatives are allowed,
stays positive. Each row carries a worked solution ending in `#### <answer>` and, optionally, a few
worked demonstrations as earlier user/assistant turns: a small instruct model rarely produces the
`#### n` format zero-shot, so demonstrations give it a reward signal to start from.

    skyrl-gym-make-arithmetic --output-dir ~/data/synthetic_arithmetic --train-size 2000 --few-shot 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA_SOURCE = "synthetic_arithmetic"
ENV_CLASSES = ("gsm8k", "gsm8k_multi_turn")
INSTRUCTION = "Solve the problem step by step, then write the final answer on its own line in the form #### <number>."
OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a // b,
}
_NAMES = [("Ava", "she"), ("Liam", "he"), ("Maya", "she"), ("Noah", "he"), ("Zoe", "she"), ("Omar", "he")]
_DEMO_POOL_SIZE = 8
_MAX_ATTEMPTS_PER_ROW = 200
_MAX_CONSECUTIVE_DUPLICATES = 2000
"""Give up when this many problems in a row repeat earlier questions: the problem space is exhausted."""


@dataclasses.dataclass(frozen=True)
class Theme:
    """Sentences for one story. `first_op` / `last_op` only make sense in that position (e.g. "buys 3 of them")."""

    name: str
    unit: str
    start: str
    ops: dict[str, str]
    question: str
    first_op: str | None = None
    last_op: str | None = None


THEMES = [
    Theme(
        "savings",
        "dollars",
        "{name} has ${a} in a piggy bank.",
        {
            "+": "{P} earns ${n} more by washing cars and saves all of it.",
            "-": "{P} takes out ${n} to buy a book.",
            "*": "{P} keeps saving until the piggy bank holds {n} times as much money as before.",
            "/": "{P} splits the money equally into {n} envelopes and keeps only one envelope.",
        },
        "How many dollars does {name} have now?",
    ),
    Theme(
        "store_stock",
        "apples",
        "A grocery store has {a} apples on its shelves.",
        {
            "+": "A delivery truck brings {n} more apples.",
            "-": "Customers buy {n} apples.",
            "*": "Before the weekend the store restocks until it has {n} times as many apples.",
            "/": "The store packs the apples equally into {n} crates and keeps one crate; the others go to other stores.",
        },
        "How many apples does the store have now?",
    ),
    Theme(
        "shopping",
        "dollars",
        "A notebook costs ${a}.",
        {
            "*": "{name} buys {n} notebooks.",
            "+": "{P} also buys a backpack for ${n}.",
            "-": "{P} uses a coupon that takes ${n} off the total.",
        },
        "How many dollars does {name} pay?",
        first_op="*",
    ),
    Theme(
        "speed_time",
        "km",
        "A cyclist rides at a steady {a} km per hour.",
        {
            "*": "The cyclist rides away from home for {n} hours.",
            "+": "After a break, the cyclist rides {n} more km away from home.",
            "-": "Then the cyclist turns around and rides {n} km back toward home.",
        },
        "How many km from home is the cyclist now?",
        first_op="*",
    ),
    Theme(
        "sharing",
        "stickers",
        "A teacher has {a} stickers.",
        {
            "+": "She buys a pack of {n} more stickers.",
            "-": "She uses {n} stickers to decorate the classroom.",
            "*": "A parent donates stickers, and now she has {n} times as many.",
            "/": "She shares all the stickers equally among {n} students.",
        },
        "How many stickers does each student get?",
        last_op="/",
    ),
    Theme(
        "garden",
        "plants",
        "A farmer plants {a} rows of corn.",
        {
            "*": "Each row has {n} corn plants.",
            "+": "Later the farmer plants {n} more corn plants.",
            "-": "Rabbits eat {n} of the corn plants.",
        },
        "How many corn plants are in the field now?",
        first_op="*",
    ),
]


@dataclasses.dataclass(frozen=True)
class Problem:
    """A structured problem: `answer` is recomputed from `start` and `ops`, never stored separately."""

    theme: str
    start: int
    ops: tuple[tuple[str, int], ...]
    question: str
    solution: str

    @property
    def answer(self) -> int:
        return evaluate(self.start, self.ops)


def evaluate(start: int, ops: tuple[tuple[str, int], ...]) -> int:
    value = start
    for symbol, operand in ops:
        value = OPERATIONS[symbol](value, operand)
    return value


def _draw_operand(rng: random.Random, symbol: str, value: int, max_value: int, allow_negative: bool) -> int | None:
    """An operand that keeps the result an integer (and positive unless allowed); None if there is none."""
    if symbol == "+":
        return rng.randint(1, max_value)
    if symbol == "-":
        if allow_negative:
            return rng.randint(1, max_value)
        return rng.randint(1, min(max_value, value - 1)) if value > 1 else None
    if symbol == "*":
        return rng.randint(2, max(2, min(9, max_value)))
    divisors = [d for d in range(2, 13) if value % d == 0]
    return rng.choice(divisors) if divisors else None


def _candidate_ops(theme: Theme, position: int, num_ops: int) -> list[str]:
    if position == 0 and theme.first_op:
        return [theme.first_op]
    if position == num_ops - 1 and theme.last_op:
        return [theme.last_op]
    return [s for s in theme.ops if s not in (theme.first_op, theme.last_op)]


def _try_problem(rng: random.Random, max_ops: int, max_value: int, allow_negative: bool) -> Problem | None:
    theme = rng.choice(THEMES)
    name, pronoun = rng.choice(_NAMES)
    num_ops = rng.randint(1, max_ops)
    start = rng.randint(2, max_value)
    value, ops = start, []
    for position in range(num_ops):
        symbol = rng.choice(_candidate_ops(theme, position, num_ops))
        operand = _draw_operand(rng, symbol, value, max_value, allow_negative)
        if operand is None:
            return None
        ops.append((symbol, operand))
        value = OPERATIONS[symbol](value, operand)
    fill = {"name": name, "P": pronoun.capitalize(), "a": start}
    sentences = [theme.start.format(**fill)]
    sentences += [theme.ops[symbol].format(n=operand, **fill) for symbol, operand in ops]
    sentences.append(theme.question.format(**fill))
    return Problem(theme.name, start, tuple(ops), " ".join(sentences), _worked_solution(start, ops, theme.unit))


def _worked_solution(start: int, ops: list[tuple[str, int]], unit: str) -> str:
    lines, value = [], start
    for symbol, operand in ops:
        result = OPERATIONS[symbol](value, operand)
        lines.append(f"{value} {symbol} {operand} = {result} {unit}.")
        value = result
    return "\n".join([*lines, f"The answer is {value}.", f"#### {value}"])


def generate_problem(
    rng: random.Random, max_ops: int = 2, max_value: int = 50, allow_negative: bool = False
) -> Problem:
    """One random problem with 1..`max_ops` operations and operands up to `max_value`."""
    if not 1 <= max_ops <= 3:
        raise ValueError(f"max_ops must be between 1 and 3, got {max_ops}")
    if max_value < 2:
        raise ValueError(f"max_value must be at least 2, got {max_value}")
    for _ in range(_MAX_ATTEMPTS_PER_ROW):
        problem = _try_problem(rng, max_ops, max_value, allow_negative)
        if problem is not None:
            return problem
    raise RuntimeError(f"no valid problem found in {_MAX_ATTEMPTS_PER_ROW} attempts (max_value={max_value})")


def _user(question: str) -> dict[str, str]:
    return {"role": "user", "content": f"{question}\n{INSTRUCTION}"}


def make_row(problem: Problem, split: str, index: int, env_class: str, demos: list[Problem]) -> dict[str, Any]:
    """A dataset row: `prompt` (demos as earlier turns, then the question), env class, reward spec, extra info."""
    prompt = []
    for demo in demos:
        prompt += [_user(demo.question), {"role": "assistant", "content": demo.solution}]
    prompt.append(_user(problem.question))
    return {
        "prompt": prompt,
        "env_class": env_class,
        "data_source": DATA_SOURCE,
        "reward_spec": {"method": "rule", "ground_truth": str(problem.answer)},
        "extra_info": {
            "split": split,
            "index": index,
            "question": problem.question,
            "answer": problem.solution,
            "num_ops": len(problem.ops),
            "theme": problem.theme,
        },
    }


def generate_dataset(
    train_size: int,
    val_size: int,
    seed: int = 0,
    max_ops: int = 2,
    max_value: int = 50,
    few_shot: int = 2,
    env_class: str = "gsm8k",
    allow_negative: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """`{"train": rows, "validation": rows}`. Questions are distinct across both splits and the demos.

    The questions depend only on the seed and the problem options, not on `few_shot`; demonstrations
    come from a separate pool whose questions never appear as training or validation questions.
    """
    if env_class not in ENV_CLASSES:
        raise ValueError(f"env_class must be one of {ENV_CLASSES}, got {env_class!r}")
    if few_shot < 0 or train_size < 0 or val_size < 0:
        raise ValueError("train_size, val_size and few_shot must be non-negative")
    demo_rng = random.Random(f"{seed}-demos")
    pool = _distinct(demo_rng, max(_DEMO_POOL_SIZE, few_shot), set(), max_ops, max_value, allow_negative)
    seen = {p.question for p in pool}
    problems = _distinct(random.Random(seed), train_size + val_size, seen, max_ops, max_value, allow_negative)
    splits = {"train": problems[:train_size], "validation": problems[train_size:]}
    return {
        split: [make_row(p, split, i, env_class, demo_rng.sample(pool, few_shot)) for i, p in enumerate(items)]
        for split, items in splits.items()
    }


def _distinct(rng: random.Random, count: int, seen: set[str], *options: Any) -> list[Problem]:
    """`count` problems whose questions are not in `seen` nor repeated (adds them to `seen`)."""
    problems: list[Problem] = []
    misses = 0
    while len(problems) < count:
        problem = generate_problem(rng, *options)
        if problem.question in seen:
            misses += 1
            if misses > _MAX_CONSECUTIVE_DUPLICATES:
                raise ValueError(
                    f"could only generate {len(problems)} of {count} distinct problems; "
                    "raise --max-value or --max-ops"
                )
            continue
        misses = 0
        seen.add(problem.question)
        problems.append(problem)
    return problems


def _atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """Write through a temporary file in the same directory, then rename, so readers never see a partial file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_dataset(splits: dict[str, list[dict[str, Any]]], output_dir: str | Path, fmt: str = "parquet") -> list[Path]:
    """Write `<split>.parquet` (nested columns) or `<split>.jsonl` per split; returns the paths."""
    if fmt not in ("parquet", "jsonl"):
        raise ValueError(f"format must be 'parquet' or 'jsonl', got {fmt!r}")
    output_dir = Path(output_dir).expanduser()
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, rows in splits.items():
        path = output_dir / f"{split}.{fmt}"
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            _atomic_write(path, lambda tmp, rows=rows: pq.write_table(pa.Table.from_pylist(rows), tmp))
        else:
            text = "".join(json.dumps(row) + "\n" for row in rows)
            _atomic_write(path, lambda tmp, text=text: Path(tmp).write_text(text, encoding="utf-8"))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write synthetic arithmetic word problems for the gsm8k envs.")
    parser.add_argument("--output-dir", default="~/data/synthetic_arithmetic")
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--val-size", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-ops", type=int, default=2, choices=[1, 2, 3])
    parser.add_argument("--max-value", type=int, default=50)
    parser.add_argument("--few-shot", type=int, default=2, help="worked demonstrations prepended to each prompt")
    parser.add_argument("--env-class", default="gsm8k", choices=ENV_CLASSES)
    parser.add_argument("--allow-negative", action="store_true", help="allow negative intermediate values")
    parser.add_argument("--format", default="parquet", choices=["parquet", "jsonl"])
    args = parser.parse_args(argv)
    try:
        splits = generate_dataset(
            args.train_size,
            args.val_size,
            seed=args.seed,
            max_ops=args.max_ops,
            max_value=args.max_value,
            few_shot=args.few_shot,
            env_class=args.env_class,
            allow_negative=args.allow_negative,
        )
    except ValueError as exc:
        parser.error(str(exc))
    for path in write_dataset(splits, args.output_dir, args.format):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
