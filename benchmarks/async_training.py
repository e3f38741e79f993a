"""Synchronous vs asynchronous training (`trainer.fully_async.max_staleness_steps` k = 1, 2) with the trainer and one
remote engine server (`python -m skyrl_train.serve`) each pinned to a core of its own (`taskset`).

    .venv/bin/python benchmarks/async_training.py                       # both recipes, sync / k=1 / k=2, 2 runs each
    .venv/bin/python benchmarks/async_training.py --recipes gsm8k --runs 1 --steps 8
    .venv/bin/python benchmarks/async_training.py --smoke               # tiny model, 3 steps, 1 run: a check, no figures

Recipes: `gsm8k` (examples/gsm8k/grpo.yaml: LoRA GRPO, 4 prompts x 4 samples, single turn) and `mcp`, the main job
(examples/mcp/grpo.yaml: multi-turn tool calls against the bundled market-data MCP server). Each run trains `--steps`
steps on fresh data (`--steps` x 4 training prompts) from the same seed, with the recipe's model, then evaluates the
held-out set once (greedy) at its last step; checkpoints are off. The weights reach the server after every update (the
LoRA adapter by folder). The trainer runs with `trainer.cpu_threads=1` on `--trainer-core`, the server with
OMP_NUM_THREADS=1 on `--server-core`; a fresh server starts for every run.

Prints, per recipe and mode (averaged over the runs, each run on its own line first): the median step time (the first
step, a warm-up, left out), rollout tokens per second of training (all steps), the idle share of each side (the
trainer: waiting for rollouts, `timing/generate` in the synchronous loop, `timing/wait_for_rollouts` asynchronously;
the generation side: the share of the step with no group generating, `1 - timing/generate / timing/step`
synchronously, `async/generation_idle_share` asynchronously) and the held-out success (`eval/all/avg_score`); then each
mode's step time relative to the synchronous one, and the synchronous step's generation share (the acceptance wants
generation and training of similar length: a share near 0.5). Writes every figure to `--out`/results.json.

It needs a quiet machine with at least two cores: the figures mean nothing while other processes compete for them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from skyrl_train.testing import TEST_CONTROL_TOKEN
from skyrl_train.testing.serve_process import start_server
from skyrl_train.tracking.metrics_file import read_metrics

REPO = Path(__file__).resolve().parents[1]
SERVED_NAME = "bench-policy"
MODES = {"sync": 0, "k1": 1, "k2": 2}
PROMPTS_PER_STEP = 4
"""Both recipes' `trainer.train_batch_size`."""


def make_data(recipe: str, folder: Path, train_size: int, val_size: int) -> None:
    """The recipe's data, made as its run script makes it (same generator, seed and settings)."""
    if (folder / "train.parquet").exists():
        return
    if recipe == "gsm8k":
        command = [
            "-m",
            "skyrl_gym.envs.gsm8k.synthetic_data",
            "--max-ops",
            "1",
            "--max-value",
            "20",
            "--few-shot",
            "1",
        ]
    else:
        command = ["-m", "skyrl_integrations.datasets.rule_based", "--servers", "market", "--complexities", "single"]
        command += ["--templates", "close_price,close_by_name,crypto_close_by_name,revenue", "--balance-templates"]
    command += ["--output-dir", str(folder), "--train-size", str(train_size), "--val-size", str(val_size)]
    subprocess.run([sys.executable, *command, "--seed", "0"], check=True, capture_output=True)


def recipe_overrides(recipe: str, data: Path) -> list[str]:
    overrides = [
        "--config",
        str(REPO / "examples" / recipe / "grpo.yaml"),
        f"data.train_data=[{data / 'train.parquet'}]",
        f"data.val_data=[{data / 'validation.parquet'}]",
    ]
    if recipe == "mcp":
        overrides.append(f"+environment.skyrl_gym.mcp_tool.demonstrations={REPO / 'examples/mcp/demonstrations.json'}")
        overrides.append("~generator.max_num_seqs")  # the local engine's; the server's is --max-num-seqs
    return overrides


def run_once(args: argparse.Namespace, recipe: str, mode: str, run: int, model: str, data: Path) -> dict:
    """One training run against a fresh pinned server; returns its figures."""
    out = args.out / recipe / f"{mode}_run{run}"
    shutil.rmtree(out, ignore_errors=True)
    process, url = start_server(
        model,
        SERVED_NAME,
        cpu_cores=[args.server_core],
        extra_args=["--max-num-seqs", str(args.max_num_seqs)],
        env={"OMP_NUM_THREADS": "1"},
        lora_root=out,
    )
    overrides = [
        *recipe_overrides(recipe, data),
        f"trainer.policy.model.path={model}",
        f"trainer.ckpt_path={out / 'ckpts'}",
        f"trainer.export_path={out / 'exports'}",
        f"trainer.policy.model.lora.lora_sync_path={out / 'lora_sync'}",
        "trainer.ckpt_interval=-1",
        "trainer.eval_before_train=false",
        f"trainer.eval_interval={args.steps}",
        "trainer.logger=jsonl",
        "trainer.cpu_threads=1",
        "generator.run_engines_locally=false",
        f"generator.remote_inference_engine_urls=[{url}]",
        f"generator.model_name={SERVED_NAME}",
        f"generator.remote_inference_engine_control_token={TEST_CONTROL_TOKEN}",
        "generator.weight_sync_backend=gloo",
        f"trainer.fully_async.max_staleness_steps={MODES[mode]}",
    ]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "1048576", "OMP_NUM_THREADS": "1"}
    command = ["taskset", "-c", str(args.trainer_core), sys.executable, "-m", "skyrl_train.entrypoints.main_base"]
    start = time.perf_counter()
    try:
        result = subprocess.run([*command, *overrides], env=env, capture_output=True, text=True)
    finally:
        process.kill()
        process.wait(30)
    if result.returncode != 0:
        raise RuntimeError(f"{recipe} {mode} run {run} failed:\n{result.stderr[-3000:]}")
    return figures(read_metrics(out / "exports" / "metrics.jsonl").steps, mode, time.perf_counter() - start)


def figures(steps: dict[int, dict], mode: str, wall_s: float) -> dict:
    """Step time, tokens/s, idle shares and held-out success of one run's `metrics.jsonl` steps."""
    trained = [steps[s] for s in sorted(steps) if "timing/step" in steps[s]]
    step_times = [row["timing/step"] for row in trained]
    if MODES[mode] == 0:
        trainer_idle = [row["timing/generate"] / row["timing/step"] for row in trained]
        generation_idle = [1 - share for share in trainer_idle]
    else:
        trainer_idle = [row["timing/wait_for_rollouts"] / row["timing/step"] for row in trained]
        generation_idle = [row["async/generation_idle_share"] for row in trained]
    last = steps[max(steps)]
    return {
        "step_s": statistics.median(step_times[1:] or step_times),
        "tokens_per_s": sum(row["generate/rollout_tokens"] for row in trained) / sum(step_times),
        "trainer_idle_share": statistics.mean(trainer_idle[1:] or trainer_idle),
        "generation_idle_share": statistics.mean(generation_idle[1:] or generation_idle),
        "heldout_success": last.get("eval/all/avg_score"),
        "staleness_mean": statistics.mean(row.get("async/staleness_mean", 0.0) for row in trained),
        "wall_s": wall_s,
    }


def summary(runs: list[dict]) -> dict:
    return {key: statistics.mean(run[key] for run in runs if run[key] is not None) for key in runs[0]}


def line(label: str, f: dict) -> str:
    return (
        f"{label:<16} step {f['step_s']:7.2f} s  {f['tokens_per_s']:7.1f} tok/s  trainer idle {f['trainer_idle_share']:.2f}"
        f"  generation idle {f['generation_idle_share']:.2f}  held-out {f['heldout_success']:.3f}"
        f"  staleness {f['staleness_mean']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", default="gsm8k,mcp", help="comma-separated: gsm8k, mcp; default: %(default)s")
    parser.add_argument("--modes", default="sync,k1,k2", help="comma-separated: sync, k1, k2; default: %(default)s")
    parser.add_argument("--runs", type=int, default=2, help="runs per recipe and mode; default: %(default)s")
    parser.add_argument("--steps", type=int, default=12, help="training steps per run; default: %(default)s")
    parser.add_argument("--val-size", type=int, default=32, help="held-out prompts; default: %(default)s")
    parser.add_argument("--trainer-core", type=int, default=0)
    parser.add_argument("--server-core", type=int, default=1)
    parser.add_argument("--max-num-seqs", type=int, default=32, help="the server's; default: %(default)s")
    parser.add_argument("--model", help="default: each recipe's model (smollm2-135m-instruct)")
    parser.add_argument("--smoke", action="store_true", help="tiny model, 3 steps, 4 held-out prompts, 1 run")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "async_benchmark")
    args = parser.parse_args()
    model = args.model
    if args.smoke:
        from skyrl_train.testing import tiny_model_path

        model = model or tiny_model_path()
        args.steps, args.val_size, args.runs = 3, 4, 1
    print(f"load average at start: {os.getloadavg()}; cores available: {sorted(os.sched_getaffinity(0))}")
    results: dict[str, dict] = {}
    for recipe in args.recipes.split(","):
        data = args.out / recipe / f"data_{args.steps}x{PROMPTS_PER_STEP}_val{args.val_size}"
        make_data(recipe, data, args.steps * PROMPTS_PER_STEP, args.val_size)
        recipe_model = model or "smollm2-135m-instruct"
        per_mode = {}
        for mode in args.modes.split(","):
            runs = [run_once(args, recipe, mode, run, recipe_model, data) for run in range(args.runs)]
            for run, f in enumerate(runs):
                print(line(f"{recipe} {mode} #{run}", f), flush=True)
            per_mode[mode] = {"runs": runs, "mean": summary(runs)}
        print(f"--- {recipe}: means over {args.runs} run(s), {args.steps} steps each")
        for mode, entry in per_mode.items():
            print(line(f"{recipe} {mode}", entry["mean"]))
        if "sync" in per_mode:
            base = per_mode["sync"]["mean"]
            print(f"{recipe}: generation share of the synchronous step {1 - base['generation_idle_share']:.2f}")
            for mode, entry in per_mode.items():
                if mode != "sync":
                    ratio = entry["mean"]["step_s"] / base["step_s"]
                    target = " (acceptance: <= 0.65)" if mode == "k1" else ""
                    print(f"{recipe}: {mode} step time / synchronous = {ratio:.2f}{target}")
        results[recipe] = per_mode
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"figures: {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
