"""Convert tau2 tasks into SkyRL dataset rows for `TauBenchEnv`:

    python -m skyrl_integrations.tau_bench.convert_data --domain retail --output_dir DIR [--train_ratio 0.9]

writes ``DIR/train.jsonl`` and ``DIR/test.jsonl``. By default the split is the official one (tau2's
``split_tasks.json``: retail 74/40, airline 30/20); with ``--train_ratio`` the domain's base tasks are shuffled with
``--seed`` and cut at that ratio instead. JSON Lines, not parquet: the gold actions' arguments differ in shape from
task to task, which one parquet struct column cannot hold.

Each row: a compact ``prompt`` (one system line; the env adds the policy and tools in `init`), ``env_class:
tau_bench``, ``data_source: tau_bench_<domain>``, ``reward_spec`` (``method: rule`` and a `GroundTruth`: the gold
actions, ``communicate_info`` outputs, NL assertions and the reward basis) and ``extra_info`` (domain, task id,
the user instruction, the split).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyrl_gym.common.fs import atomic_write_text
from skyrl_integrations.tau_bench.domains import DOMAINS, Domain, get_domain
from skyrl_integrations.tau_bench.reward import GroundTruth

ENV_CLASS = "tau_bench"
OUTPUT_SPLITS = ("train", "test")


def task_row(domain: Domain, task: Any, split: str) -> dict[str, Any]:
    """One dataset row for `task` of `domain`."""
    return {
        "data_source": f"tau_bench_{domain.name}",
        "prompt": [{"role": "system", "content": f"You are a customer service agent for the {domain.name} domain."}],
        "env_class": ENV_CLASS,
        "reward_spec": {"method": "rule", "ground_truth": GroundTruth.from_task(task).to_dict()},
        "extra_info": {
            "domain": domain.name,
            "task_id": task.id,
            "instruction": str(task.user_scenario),
            "split": split,
        },
    }


def split_task_ids(domain: Domain, train_ratio: float | None, seed: int) -> dict[str, list[str]]:
    """Task ids per output split: the official train/test split, or a seeded shuffle of the base tasks cut at
    `train_ratio`."""
    if train_ratio is None:
        return {split: [task.id for task in domain.split(split)] for split in OUTPUT_SPLITS}
    if not 0.0 < train_ratio < 1.0:
        raise ValueError(f"--train_ratio must be in (0, 1), got {train_ratio}")
    ids = [task.id for task in domain.split("base")]
    random.Random(seed).shuffle(ids)
    cut = round(len(ids) * train_ratio)
    if cut in (0, len(ids)):
        raise ValueError(f"--train_ratio {train_ratio} leaves a split empty ({len(ids)} tasks)")
    return {"train": ids[:cut], "test": ids[cut:]}


def convert(domain_name: str, output_dir: Path, train_ratio: float | None = None, seed: int = 0) -> dict[str, Path]:
    """Write ``train.jsonl`` and ``test.jsonl`` for `domain_name` into `output_dir`; returns the paths."""
    domain = get_domain(domain_name)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, ids in split_task_ids(domain, train_ratio, seed).items():
        rows = [task_row(domain, domain.task(task_id), split) for task_id in ids]
        paths[split] = output_dir / f"{split}.jsonl"
        atomic_write_text(paths[split], "".join(json.dumps(row) + "\n" for row in rows))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skyrl_integrations.tau_bench.convert_data", description=__doc__)
    parser.add_argument("--domain", required=True, choices=DOMAINS)
    parser.add_argument("--output_dir", required=True, type=Path)
    parser.add_argument(
        "--train_ratio", type=float, default=None, help="shuffle the base tasks and cut here (default: official split)"
    )
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed for --train_ratio (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        paths = convert(args.domain, args.output_dir, args.train_ratio, args.seed)
    except ValueError as error:
        parser.error(str(error))
    for split, path in paths.items():
        print(f"{split}: {sum(1 for _ in path.open())} rows -> {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
