"""GRPO step time, this project vs Hugging Face TRL's `GRPOTrainer`, on one identical config, in one invocation.

    bash benchmarks/grpo_vs_trl/run.sh --steps 5 --warmup 1 --threads 2 --trl-grad-accum 4

(`run.sh` builds TRL's venv on first use, then runs this file with the project's venv.) The config, for both:
SmolLM2-135M-Instruct in fp32 (the local alias), LoRA r16 alpha 32 on all linear layers, 8 prompts x 4 samples per
step, at most 64 new tokens at temperature 1.0, AdamW lr 1e-5 constant (no weight decay), no KL, one optimizer step
per batch, gradient checkpointing off; the prompts (two few-shot demonstrations, single-turn JSON tool call) and the
reward are `task.py`'s, and step k of both trainers sees the same 8 prompts with the same seed.

Each trainer runs in its own process (TRL in its venv, this project in its own), loaded once; the driver lets them
take single steps in turn (ABBA order, so neither always runs on a machine the other just warmed), `--warmup` steps
each first, then `--steps` measured ones. It prints per step the two reward means side by side, then the medians of
the measured steps: step time and its phases (generate, old logprobs, update, sync, other = scoring / batching /
advantages), completion tokens per second of step and of generation, the peak RSS of each trainer's process over
the measured steps (and over the whole run, model loading included), and the ratio of the median step times.
Figures depend on the machine's load: compare the ratio, not absolute times, across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHASES = ("generate", "old_logprobs", "update", "sync", "score_other")


class Trainer:
    """One trainer process taking steps when told (see `stepping`)."""

    def __init__(self, name: str, command: list[str], log: Path, threads: int | None):
        self.name = name
        read_fd, write_fd = os.pipe()
        self.log = log
        env = {**os.environ, "BENCH_REPORT_FD": str(write_fd), "PYTHONPATH": str(HERE)}
        if threads is not None:
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        with open(log, "w") as stderr:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=stderr, stderr=stderr, pass_fds=(write_fd,), env=env, text=True
            )
        os.close(write_fd)
        self.reports = os.fdopen(read_fd)
        self.records: list[dict] = []

    def step(self) -> dict:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        line = self.reports.readline()
        if not line:
            self.process.wait()
            tail = "".join(self.log.read_text().splitlines(keepends=True)[-30:])
            raise RuntimeError(f"{self.name} exited ({self.process.returncode}) before reporting a step:\n{tail}")
        record = json.loads(line)
        self.records.append(record)
        return record

    def stop(self) -> None:
        try:
            self.process.stdin.write("stop\n")
            self.process.stdin.close()
        except BrokenPipeError:
            pass
        self.process.wait(timeout=300)


def versions(python: str) -> str:
    code = "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def median(records: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in records)


def summary_rows(measured: dict[str, list[dict]], everything: dict[str, list[dict]]) -> list[tuple[str, ...]]:
    rows = []
    for key in ("step_time", *PHASES):
        rows.append((f"{key} (s, median)", *(f"{median(measured[n], key):.2f}" for n in measured)))
    for name in measured:
        for record in measured[name]:
            record["tokens_per_s"] = (record["completion_tokens"] or 0) / record["step_time"]
            record["generate_tokens_per_s"] = (record["completion_tokens"] or 0) / max(record["generate"], 1e-9)
    rows.append(
        ("completion tokens/step (median)", *(f"{median(measured[n], 'completion_tokens'):.0f}" for n in measured))
    )
    rows.append(("completion tokens/s of step", *(f"{median(measured[n], 'tokens_per_s'):.1f}" for n in measured)))
    rows.append(
        ("completion tokens/s of generate", *(f"{median(measured[n], 'generate_tokens_per_s'):.1f}" for n in measured))
    )
    rows.append(
        ("peak RSS GB, measured steps", *(f"{max(r['peak_rss_gb'] for r in measured[n]):.2f}" for n in measured))
    )
    rows.append(("peak RSS GB, whole run", *(f"{max(r['peak_rss_gb'] for r in everything[n]):.2f}" for n in measured)))
    rows.append(("RSS GB after last step", *(f"{measured[n][-1]['rss_gb']:.2f}" for n in measured)))
    return rows


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trl-python", required=True, help="python of the venv that holds trl")
    parser.add_argument("--steps", type=int, default=5, help="measured steps per trainer")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured steps per trainer first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads of both trainers (OMP_NUM_THREADS); default: torch's"
    )
    parser.add_argument("--ours-threads", type=int, default=None, help="this project's threads (default: --threads)")
    parser.add_argument("--trl-threads", type=int, default=None, help="TRL's threads (default: --threads)")
    parser.add_argument(
        "--trl-grad-accum",
        type=int,
        default=1,
        help="TRL trains each step's completions in this many micro-batches (default 1: all at once, its fastest; "
        "4 cuts its peak memory)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary folder")
    args = parser.parse_args()
    threads = {
        "ours": args.threads if args.ours_threads is None else args.ours_threads,
        "trl": args.threads if args.trl_threads is None else args.trl_threads,
    }

    from skyrl_train.models import resolve_model_path

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="grpo_vs_trl_"))
    workdir.mkdir(parents=True, exist_ok=True)
    total = args.warmup + args.steps
    ours_version, trl_version = versions(sys.executable), versions(args.trl_python)
    print(f"torch / transformers / peft: ours {ours_version}; TRL venv {trl_version}")
    if ours_version != trl_version:
        raise SystemExit("the TRL venv has other torch / transformers / peft versions than the project's venv")
    common = ["--steps", str(total), "--seed", str(args.seed), "--prompts", str(args.prompts)]
    common += ["--samples", str(args.samples), "--max-new-tokens", str(args.max_new_tokens)]
    model = resolve_model_path("smollm2-135m-instruct")
    trainers = {
        "ours": Trainer(
            "ours",
            [sys.executable, str(HERE / "ours_side.py"), *common, "--workdir", str(workdir / "ours")],
            workdir / "ours.log",
            threads["ours"],
        ),
        "trl": Trainer(
            "trl",
            [args.trl_python, str(HERE / "trl_side.py"), *common, "--model", str(model)]
            + ["--output-dir", str(workdir / "trl"), "--grad-accum", str(args.trl_grad_accum)],
            workdir / "trl.log",
            threads["trl"],
        ),
    }
    print(
        f"logs in {workdir}; {args.warmup} warm-up + {args.steps} measured steps each, alternating; "
        f"threads: ours {threads['ours'] or 'torch default'}, TRL {threads['trl'] or 'torch default'}; "
        f"TRL micro-batches per step: {args.trl_grad_accum}; "
        f"load average at start: {os.getloadavg()[0]:.1f}"
    )
    try:
        for step in range(total):
            order = ["ours", "trl"] if step % 2 == 0 else ["trl", "ours"]
            for name in order:
                record = trainers[name].step()
                print(
                    f"  step {step + 1} {name:4s}: {record['step_time']:6.1f} s, reward {record['reward']:.3f}, "
                    f"peak RSS {record['peak_rss_gb']:.2f} GB",
                    flush=True,
                )
    finally:
        for trainer in trainers.values():
            trainer.stop()

    everything = {name: t.records for name, t in trainers.items()}
    measured = {name: records[args.warmup :] for name, records in everything.items()}
    print("\nreward per step (mean over the 32 samples; step 1..warm-up unmeasured)")
    print_table(
        ("step", "ours", "trl"),
        [
            (str(i + 1), f"{o['reward']:.3f}", f"{t['reward']:.3f}")
            for i, (o, t) in enumerate(zip(everything["ours"], everything["trl"], strict=True))
        ],
    )
    print("\nmeasured steps")
    print_table(("", "ours", "trl"), summary_rows(measured, everything))
    ratio = median(measured["trl"], "step_time") / median(measured["ours"], "step_time")
    print(f"\nratio (TRL median step / ours): {ratio:.2f}x; load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
