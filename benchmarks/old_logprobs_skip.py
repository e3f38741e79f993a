"""What taking the old logprobs from the update's own forward saves, for a batch that gets one optimizer step.

    .venv/bin/python benchmarks/old_logprobs_skip.py --prompts 4 --samples 4 --shared-tokens 480

The batch is laid out as the main job's: ``--prompts`` questions x ``--samples`` responses, each prompt the same
``--shared-tokens`` system prompt and demonstrations plus its own ``--question-tokens``, responses of
``--min-response-tokens`` .. ``--response-tokens`` tokens. The policy is LoRA (``--lora-rank``) on ``--model`` in fp32,
with the main job's micro-batch sizes. Per step, alternating:

- separate: ``compute_logprobs`` (the old-logprob forward, ``--micro-forward`` rows at a time), then ``ppo_train``
  with those old logprobs;
- from the update: ``ppo_train`` on the batch without old logprobs (what ``PPOTrainer`` does for one mini-batch and
  one epoch).

The first round warms up and is not counted; medians of ``--steps`` rounds are printed as wall time and as CPU time
of this process (``time.process_time``, all its threads), with the machine's load average: on a shared machine the
wall time moves with other work, the CPU time much less.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from skyrl_train.config.schema import AlgorithmConfig, LoraConfig, ModelConfig, OptimizerConfig, PolicyConfig
from skyrl_train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
from skyrl_train.models import DEFAULT_MODEL
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.workers import PolicyWorker


def make_batch(args: argparse.Namespace, vocab: int) -> TrainingInputBatch:
    g = torch.Generator().manual_seed(0)
    shared = torch.randint(1, vocab, (args.shared_tokens,), generator=g).tolist()
    prompts, responses = [], []
    for _ in range(args.prompts):
        question = torch.randint(1, vocab, (args.question_tokens,), generator=g).tolist()
        for _ in range(args.samples):
            length = int(torch.randint(args.min_response_tokens, args.response_tokens + 1, (1,), generator=g))
            prompts.append(shared + question)
            responses.append(torch.randint(1, vocab, (length,), generator=g).tolist())
    rows = len(prompts)
    masks = [[1] * len(r) for r in responses]
    batch = convert_prompts_responses_to_batch_tensors(0, prompts, responses, [0.0] * rows, masks)
    batch["advantages"] = torch.randn(batch["response_mask"].shape, generator=g) * batch["response_mask"]
    return batch


class Clock:
    """Wall and CPU seconds since the last ``lap``."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        elapsed = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return elapsed


def step(policy: PolicyWorker, batch: TrainingInputBatch, separate: bool, args) -> dict[str, tuple[float, float]]:
    """One update; returns the (wall, CPU) seconds of the old-logprob forward and of ppo_train."""
    step_batch = batch.select(["sequences", "attention_mask", "response_mask", "loss_mask", "advantages"])
    clock = Clock()
    forward = (0.0, 0.0)
    if separate:
        step_batch["action_log_probs"] = policy.compute_logprobs(step_batch, args.micro_forward)
        forward = clock.lap()
    metrics = policy.ppo_train(step_batch, step_batch.batch_size, args.micro_train)
    assert metrics["policy/old_logprobs_from_update_forward"] == float(not separate)
    return {"forward": forward, "ppo_train": clock.lap()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--lora-rank", type=int, default=32, help="0 = full fine-tuning")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--shared-tokens", type=int, default=480)
    parser.add_argument("--question-tokens", type=int, default=24)
    parser.add_argument("--min-response-tokens", type=int, default=16)
    parser.add_argument("--response-tokens", type=int, default=64)
    parser.add_argument("--micro-forward", type=int, default=16, help="trainer.micro_forward_batch_size_per_gpu")
    parser.add_argument("--micro-train", type=int, default=8, help="trainer.micro_train_batch_size_per_gpu")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    policy = PolicyWorker(
        PolicyConfig(
            model=ModelConfig(path=args.model, lora=LoraConfig(rank=args.lora_rank, alpha=2 * args.lora_rank)),
            optimizer_config=OptimizerConfig(lr=1e-5, scheduler="constant"),
        ),
        AlgorithmConfig(use_kl_loss=False),
    )
    batch = make_batch(args, policy.model.config.vocab_size)
    timings: dict[bool, list[dict[str, tuple[float, float]]]] = {True: [], False: []}
    for round_ in range(args.steps + 1):
        for separate in (True, False):
            result = step(policy, batch, separate, args)
            if round_ > 0:
                timings[separate].append(result)

    tokens = int(batch["attention_mask"].sum())
    print(
        f"model {args.model}, LoRA rank {args.lora_rank}, {batch.batch_size} rows x {batch['sequences'].shape[1]} "
        f"columns ({tokens} tokens, {int(batch['loss_mask'].sum())} response tokens), micro-batches "
        f"{args.micro_forward} (forward) / {args.micro_train} (train), torch threads {torch.get_num_threads()}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    for clock, kind in ((0, "wall"), (1, "CPU")):
        totals = {}
        for separate, label in ((True, "separate old-logprob forward"), (False, "old logprobs from the update")):
            runs = timings[separate]
            forward = statistics.median(run["forward"][clock] for run in runs)
            update = statistics.median(run["ppo_train"][clock] for run in runs)
            totals[separate] = statistics.median(run["forward"][clock] + run["ppo_train"][clock] for run in runs)
            print(
                f"{kind:4s} {label:30s}: forward {forward:7.2f} s + ppo_train {update:7.2f} s = "
                f"{totals[separate]:7.2f} s (median of {args.steps})"
            )
        saved = totals[True] - totals[False]
        print(f"{kind:4s} saved per step: {saved:.2f} s ({100 * saved / totals[True]:.0f}% of the forward + update)")


if __name__ == "__main__":
    main()
