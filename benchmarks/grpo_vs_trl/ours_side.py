"""This project's trainer on the benchmark task, one step per go-ahead from the driver (see `stepping`).

    .venv/bin/python benchmarks/grpo_vs_trl/ours_side.py --steps N --seed S --prompts P --samples G --workdir DIR

Run by `compare.py`. The run is `main_base`'s (`BasePPOExp`) with the config below and a single-turn env that
scores the reply with `task.reward`; the tracker reports each step's metrics to the driver and waits for the next
go-ahead. Phases are the trainer's own timers: `timing/generate`, `timing/fwd_logprobs_values_reward` (old
logprobs), `timing/policy_train` (update), `timing/sync_weights`; the step is `timing/step` (generation included);
memory is the trainer's `memory/peak_rss_gb` and `memory/rss_gb`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import stepping
import task

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_train.config import load_config
from skyrl_train.dataset import PromptDataLoader
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.tracking import Tracking

ENV_ID = "bench_json_tool_call"


class JsonToolCallEnv(BaseTextEnv):
    """One step: the reply is scored by `task.reward` against the row's expected call, and the episode ends."""

    def __init__(self, env_config=None, extras=None):
        super().__init__()
        self.expected = extras["reward_spec"]["ground_truth"]

    def step(self, action: str) -> BaseTextEnvStepOutput:
        return BaseTextEnvStepOutput(observations=[], reward=task.reward(action, self.expected), done=True, metadata={})


class TurnTakingTracker(Tracking):
    """Reports each step's metrics to the driver, then waits for the next go-ahead."""

    def log(self, metrics, step):
        super().log(metrics, step)
        generate = metrics["timing/generate"]
        step_time = metrics["timing/step"]
        stepping.report(
            {
                "step": step,
                "step_time": step_time,
                "generate": generate,
                "old_logprobs": metrics.get("timing/fwd_logprobs_values_reward", 0.0),
                "update": metrics["timing/policy_train"],
                "sync": metrics.get("timing/sync_weights", 0.0),
                "score_other": step_time
                - generate
                - metrics.get("timing/fwd_logprobs_values_reward", 0.0)
                - metrics["timing/policy_train"]
                - metrics.get("timing/sync_weights", 0.0),
                "reward": metrics["reward/avg_raw_reward"],
                "completion_tokens": metrics["generate/rollout_tokens"],
                "training_tokens": metrics.get("trainer/response_tokens"),
                # The trainer's own per-step memory metrics (it resets the RSS high-water mark after each step).
                "rss_gb": metrics["memory/rss_gb"],
                "peak_rss_gb": metrics["memory/peak_rss_gb"],
            }
        )
        if not stepping.wait_for_go():
            raise SystemExit(0)


class Experiment(BasePPOExp):
    def get_tracker(self) -> Tracking:
        t = self.cfg.trainer
        return TurnTakingTracker(t.project_name, t.run_name, backends=["console"], output_dir=self.export_path)


def overrides(args: argparse.Namespace, data: Path) -> list[str]:
    """The benchmark's config (module docstring of `compare.py`) in this project's keys."""
    return [
        "trainer.policy.model.path=smollm2-135m-instruct",
        "trainer.bf16=false",
        "trainer.gradient_checkpointing=false",
        "trainer.policy.model.lora.rank=16",
        "trainer.policy.model.lora.alpha=32",
        "trainer.policy.model.lora.target_modules=all-linear",
        "trainer.policy.optimizer_config.lr=1e-5",
        "trainer.policy.optimizer_config.weight_decay=0.0",
        "trainer.policy.optimizer_config.scheduler=constant_with_warmup",
        "trainer.algorithm.advantage_estimator=grpo",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.epochs=1",
        f"trainer.train_batch_size={args.prompts}",
        f"trainer.policy_mini_batch_size={args.prompts}",
        "trainer.micro_train_batch_size_per_gpu=8",
        "trainer.micro_forward_batch_size_per_gpu=16",
        "trainer.use_sample_packing=true",
        f"trainer.seed={args.seed}",
        "trainer.eval_interval=-1",
        "trainer.eval_before_train=false",
        "trainer.ckpt_interval=-1",
        "trainer.max_prompt_length=512",
        f"trainer.ckpt_path={args.workdir}/ckpts",
        f"trainer.export_path={args.workdir}/exports",
        f"generator.n_samples_per_prompt={args.samples}",
        f"generator.max_num_seqs={args.prompts * args.samples}",
        "generator.max_turns=1",
        f"generator.sampling_params.max_generate_length={args.max_new_tokens}",
        "generator.sampling_params.temperature=1.0",
        "generator.max_input_length=512",
        f"data.train_data=[{data}]",
        "data.val_data=[]",
        f"environment.env_class={ENV_ID}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    data = args.workdir / "train.jsonl"
    rows = task.make_rows(args.prompts * args.steps, args.seed)
    # Stored so that the trainer's shuffled loader visits them in task order, as TRL's unshuffled sampler does.
    order = PromptDataLoader(rows, args.prompts, seed=args.seed, collate_fn=list).epoch_order(0)
    stored = [None] * len(rows)
    for row, position in zip(rows, order, strict=True):
        stored[position] = {
            "prompt": row["prompt"],
            "env_class": ENV_ID,
            "reward_spec": {"ground_truth": row["expected"]},
        }
    data.write_text("".join(json.dumps(row) + "\n" for row in stored))
    skyrl_gym.register(ENV_ID, JsonToolCallEnv)
    if not stepping.wait_for_go():
        return
    Experiment(load_config(overrides(args, data))).run()


if __name__ == "__main__":
    main()
