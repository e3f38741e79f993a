"""TRL's `GRPOTrainer` on the benchmark task, one step per go-ahead from the driver (see `stepping`).

    <trl venv>/bin/python benchmarks/grpo_vs_trl/trl_side.py --model DIR --steps N --seed S --prompts P --samples G

Run by `compare.py`, in the benchmark-only venv that holds trl (built by `run.sh`). Phase times come from wrapping
the trainer's own methods: `_generate` (sampling), `_get_per_token_logps_and_entropies` when called while scoring
completions (old / ref logprobs; none with beta=0 and one iteration), the rest of `_generate_and_score_completions`
(decoding, rewards, advantages), and the update (everything else in the step: forward, backward, optimizer).
"""

from __future__ import annotations

import argparse
import functools
import time

import stepping
import task
import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer


class PhaseClock:
    """Seconds spent in the wrapped methods during the current step."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.scoring = False

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def wrap(self, trainer: GRPOTrainer) -> None:
        generate = trainer._generate
        score = trainer._generate_and_score_completions
        logps = trainer._get_per_token_logps_and_entropies

        @functools.wraps(generate)
        def timed_generate(*args, **kwargs):
            start = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                self.add("generate", time.perf_counter() - start)

        @functools.wraps(score)
        def timed_score(*args, **kwargs):
            start, self.scoring = time.perf_counter(), True
            try:
                return score(*args, **kwargs)
            finally:
                self.scoring = False
                self.add("generate_and_score", time.perf_counter() - start)

        @functools.wraps(logps)
        def timed_logps(*args, **kwargs):
            start = time.perf_counter()
            try:
                return logps(*args, **kwargs)
            finally:
                if self.scoring:
                    self.add("old_logprobs", time.perf_counter() - start)

        trainer._generate = timed_generate
        trainer._generate_and_score_completions = timed_score
        trainer._get_per_token_logps_and_entropies = timed_logps


class TakeTurns(TrainerCallback):
    """Waits for the driver before each step and reports the step after it."""

    def __init__(self, clock: PhaseClock, samples: int):
        self.clock = clock
        self.samples = samples
        self.step_start = 0.0
        self.logged: dict[str, float] = {}

    def on_step_begin(self, args, state, control, **kwargs):
        if not stepping.wait_for_go():
            raise SystemExit(0)
        stepping.reset_peak_rss()
        self.clock.seconds = {}
        self.logged = {}
        self.step_start = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logged.update(logs or {})

    def on_step_end(self, args, state, control, **kwargs):
        step_time = time.perf_counter() - self.step_start
        seconds = self.clock.seconds
        scoring = seconds.get("generate_and_score", 0.0)
        self.pending = {
            "step": state.global_step,
            "step_time": step_time,
            "generate": seconds.get("generate", 0.0),
            "old_logprobs": seconds.get("old_logprobs", 0.0),
            "score_other": scoring - seconds.get("generate", 0.0) - seconds.get("old_logprobs", 0.0),
            "update": step_time - scoring,
            "sync": 0.0,
            **stepping.rss_gb(),
        }

    def on_log_end(self, logs: dict[str, float]) -> None:
        record = dict(self.pending)
        record["reward"] = logs.get("reward")
        mean_length = logs.get("completions/mean_length")
        record["completion_tokens"] = None if mean_length is None else mean_length * self.samples
        stepping.report(record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument(
        "--grad-accum", type=int, default=1, help="train the step's completions in this many micro-batches (default 1)"
    )
    args = parser.parse_args()

    rows = task.make_rows(args.prompts * args.steps, args.seed)
    dataset = Dataset.from_list(rows)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)

    def reward(completions, expected, **_):
        return [
            task.reward(completion[-1]["content"], want) for completion, want in zip(completions, expected, strict=True)
        ]

    config = GRPOConfig(
        output_dir=args.output_dir,
        use_cpu=True,
        bf16=False,
        seed=args.seed,
        max_steps=args.steps,
        # One generation of prompts x samples per optimizer step, trained in --grad-accum micro-batches.
        per_device_train_batch_size=args.prompts * args.samples // args.grad_accum,
        gradient_accumulation_steps=args.grad_accum,
        num_generations=args.samples,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        learning_rate=1e-5,
        lr_scheduler_type="constant",
        beta=0.0,
        gradient_checkpointing=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        shuffle_dataset=False,
        disable_tqdm=True,
    )
    lora = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")
    trainer = GRPOTrainer(
        model=model,
        args=config,
        reward_funcs=reward,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora,
    )
    clock = PhaseClock()
    clock.wrap(trainer)
    turns = TakeTurns(clock, args.prompts * args.samples)
    trainer.add_callback(turns)
    log = trainer.log

    @functools.wraps(log)
    def log_and_report(logs, *rest, **kwargs):
        log(logs, *rest, **kwargs)
        if "reward" in logs:
            turns.on_log_end(logs)

    trainer.log = log_and_report
    trainer.train()


if __name__ == "__main__":
    main()
