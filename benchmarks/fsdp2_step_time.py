"""Policy update step time: ``trainer.strategy=single`` (this process) vs ``fsdp2`` (N gloo ranks on Ray).

    .venv/bin/python benchmarks/fsdp2_step_time.py --rows 8 --prompt-tokens 64 --response-tokens 32

Both sides train the same model on the same batch of ``--rows`` random sequences (``--prompt-tokens`` prompt +
``--response-tokens`` response each): old logprobs (one forward pass over the batch), then ``ppo_train`` with one
optimizer step per ``--mini-batch`` rows and ``--micro-batch`` rows per forward/backward on a worker. The first
step of each side warms up and is not timed; the median of ``--steps`` timed steps is printed. fsdp2 start-up
(cluster, actors, sharding) is reported separately. On a CPU machine the ranks share the same cores as ``single``,
so this shows the overhead of sharding and of Ray, not a speed-up.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from skyrl_train.config.schema import TrainerConfig
from skyrl_train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
from skyrl_train.distributed.worker_groups import build_fsdp_workers
from skyrl_train.models import DEFAULT_MODEL
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.workers import PolicyWorker


def make_batch(rows: int, prompt_tokens: int, response_tokens: int, vocab: int) -> TrainingInputBatch:
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, vocab, (prompt_tokens,), generator=g).tolist() for _ in range(rows)]
    responses = [torch.randint(1, vocab, (response_tokens,), generator=g).tolist() for _ in range(rows)]
    masks = [[1] * response_tokens for _ in range(rows)]
    batch = convert_prompts_responses_to_batch_tensors(0, prompts, responses, [0.0] * rows, masks)
    batch["advantages"] = torch.randn(batch["response_mask"].shape, generator=g)
    return batch


def timed_steps(policy, batch: TrainingInputBatch, args: argparse.Namespace) -> list[float]:
    times = []
    for _ in range(args.steps + 1):
        step_batch = batch.select(["sequences", "attention_mask", "response_mask", "loss_mask", "advantages"])
        start = time.perf_counter()
        step_batch["action_log_probs"] = policy.compute_logprobs(step_batch, args.micro_batch)
        policy.ppo_train(step_batch, args.mini_batch, args.micro_batch)
        times.append(time.perf_counter() - start)
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--lora-rank", type=int, default=8, help="0 = full fine-tuning")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--response-tokens", type=int, default=32)
    parser.add_argument("--mini-batch", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()

    t = TrainerConfig()
    t.strategy = "fsdp2"
    t.placement.colocate_all = False
    t.placement.policy_num_gpus_per_node = args.ranks
    t.policy.model.path = t.ref.model.path = args.model
    t.policy.model.lora.rank = args.lora_rank
    t.algorithm.use_kl_loss = False
    t.gradient_checkpointing = t.bf16 = False

    torch.manual_seed(t.seed)
    single = PolicyWorker(t.policy, t.algorithm)
    vocab = single.model.config.vocab_size
    batch = make_batch(args.rows, args.prompt_tokens, args.response_tokens, vocab)
    single_times = timed_steps(single, batch, args)
    del single

    start = time.perf_counter()
    policy, _, _ = build_fsdp_workers(t, temperature=1.0, num_training_steps=None)
    startup = time.perf_counter() - start
    try:
        fsdp_times = timed_steps(policy, batch, args)
    finally:
        policy.actors.kill()

    shape = f"{args.rows} rows x ({args.prompt_tokens} + {args.response_tokens}) tokens, LoRA rank {args.lora_rank}"
    print(f"model {args.model}, {shape}, torch threads {torch.get_num_threads()}")
    print(f"single          : {statistics.median(single_times):7.2f} s/step (median of {args.steps})")
    print(f"fsdp2 x{args.ranks} (gloo) : {statistics.median(fsdp_times):7.2f} s/step (median of {args.steps})")
    print(f"fsdp2 start-up  : {startup:7.2f} s (Ray cluster, actors, model load and sharding)")


if __name__ == "__main__":
    main()
