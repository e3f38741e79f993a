"""Cost of the tau-bench env's in-process parts: tool calls, the per-episode reset and the reward.

    .venv/bin/python benchmarks/tau_bench_env.py [--domain retail] [--tasks 20]

Replays the gold actions of the first `--tasks` tasks of the domain and prints medians (and p90) of:

- a read tool call, a write tool call on an already-copied DB, and an episode's first write (which copies the DB);
- the reset: building a `TauBenchEnv` for a task plus `init` (scripted user), and `EpisodeToolkit` alone;
- the reward: the whole `compute_reward` (tau2's evaluators: the agent's calls and the gold actions each replayed
  on a fresh official environment, then both DBs hashed).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from skyrl_integrations.tau_bench.domains import get_domain
from skyrl_integrations.tau_bench.env import TauBenchEnv
from skyrl_integrations.tau_bench.reward import GroundTruth, compute_reward
from skyrl_integrations.tau_bench.toolkit import EpisodeToolkit

ROWS = (
    "reset: TauBenchEnv() + init",
    "reset: EpisodeToolkit()",
    "tool call: read / generic",
    "tool call: first write (copies the DB)",
    "tool call: write",
    "reward: compute_reward",
)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def run(domain_name: str, n_tasks: int) -> dict[str, list[float]]:
    domain = get_domain(domain_name)
    from tau2.environment.toolkit import ToolType

    kinds = domain.make_toolkit(None)
    samples: dict[str, list[float]] = {name: [] for name in ROWS}
    for task in list(domain.tasks.values())[:n_tasks]:
        extras = {"extra_info": {"domain": domain_name, "task_id": task.id}}
        elapsed, env = _timed(lambda: TauBenchEnv({}, extras))  # noqa: B023
        init_s, _ = _timed(lambda: env.init([]))  # noqa: B023
        samples["reset: TauBenchEnv() + init"].append(elapsed + init_s)
        samples["reset: EpisodeToolkit()"].append(_timed(lambda: EpisodeToolkit(domain))[0])
        for action in GroundTruth.from_task(task).actions:
            copied = env.toolkit.copied
            elapsed, _ = _timed(
                lambda: env.trajectory.agent_calls(env.toolkit, action["name"], action["arguments"], "")  # noqa: B023
            )
            if kinds.has_tool(action["name"]) and kinds.tool_type(action["name"]) is ToolType.WRITE:
                samples["tool call: write" if copied else "tool call: first write (copies the DB)"].append(elapsed)
            else:
                samples["tool call: read / generic"].append(elapsed)
        truth = GroundTruth.from_task(task)
        samples["reward: compute_reward"].append(
            _timed(lambda: compute_reward(domain, task, truth, env.trajectory.messages))[0]  # noqa: B023
        )
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="retail", choices=("retail", "airline"))
    parser.add_argument("--tasks", type=int, default=20, help="first N tasks of the domain (default: %(default)s)")
    args = parser.parse_args()
    load_s, _ = _timed(lambda: get_domain(args.domain))
    print(f"tau-bench {args.domain}: domain load {load_s * 1000:.0f} ms (once per process), {args.tasks} tasks")
    print(f"{'':46} {'n':>5} {'median':>10} {'p90':>10}")
    for name, values in run(args.domain, args.tasks).items():
        if not values:
            print(f"{name:46} {0:5d} {'-':>10} {'-':>10}")
            continue
        values = sorted(values)
        p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
        print(f"{name:46} {len(values):5d} {_ms(statistics.median(values)):>10} {_ms(p90):>10}")
    return 0


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms" if seconds < 0.01 else f"{seconds * 1000:.1f} ms"


if __name__ == "__main__":
    raise SystemExit(main())
