"""Reference forward and policy update of the main job on episodes the env played (real multi-turn shapes).

    .venv/bin/python benchmarks/episode_update.py --episodes outputs/mcp/data/warm_start.jsonl --rounds 4

``--episodes``: a JSONL of prompt-completion conversations, as `skyrl_integrations.datasets.demonstrations` writes them
(the main job's ``$OUT/data/warm_start.jsonl``). The batch takes ``--per-template`` episodes of each template, encoded
as the generator encodes an episode (`ConversationEncoder`): the env's prompt (system prompt, worked examples,
question) as the prompt, the turns and tool results as the response, the model's turns in the loss mask. The policy is
the main job's: LoRA rank 32 on SmolLM2-135M-Instruct in fp32, sample packing, a KL loss to the adapter-off model,
micro-batches of 2 rows for the update and 4 for the reference forward, random advantages on the loss tokens.

Prints the batch's shape (rows, response and loss tokens), then per round the reference forward's and the update's
seconds; the median leaves out the first round (warm-up). Compare two commits by running it at each, back to back, on a
quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict

import torch

from skyrl_train.config.schema import AlgorithmConfig, LoraConfig, ModelConfig, OptimizerConfig, PolicyConfig
from skyrl_train.models import DEFAULT_MODEL, load_tokenizer, resolve_model_path
from skyrl_train.sft.encoding import ConversationEncoder, collate
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.workers import PolicyWorker, RefWorker


def episode_batch(path: str, per_template: int, tokenizer) -> TrainingInputBatch:
    by_template: dict[str, list[dict]] = defaultdict(list)
    with open(path) as lines:
        for line in lines:
            row = json.loads(line)
            by_template[row["template"]].append(row)
    encoder = ConversationEncoder(tokenizer)
    examples = [
        encoder.encode(row["prompt"] + row["completion"], prompt_length=len(row["prompt"]))
        for template in sorted(by_template)
        for row in by_template[template][:per_template]
    ]
    batch = collate(examples, tokenizer.pad_token_id)
    del batch["truncated"]
    generator = torch.Generator().manual_seed(0)
    batch["advantages"] = torch.randn(batch["loss_mask"].shape, generator=generator) * batch["loss_mask"]
    return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", required=True, help="JSONL of prompt-completion episodes with a template field")
    parser.add_argument("--per-template", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4, help="rounds, the first a warm-up")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    path = resolve_model_path(DEFAULT_MODEL)
    batch = episode_batch(args.episodes, args.per_template, load_tokenizer(path))
    print(
        f"{batch.batch_size} rows, {int(batch['response_mask'].sum())} response tokens, "
        f"{int(batch['loss_mask'].sum())} of them loss tokens; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    torch.manual_seed(0)
    policy = PolicyWorker(
        PolicyConfig(
            model=ModelConfig(path=path, lora=LoraConfig(rank=32, alpha=64)),
            optimizer_config=OptimizerConfig(lr=1e-4, scheduler="constant"),
        ),
        AlgorithmConfig(use_kl_loss=True, kl_loss_coef=0.05, kl_estimator_type="k3"),
        temperature=0.4,
        dtype=torch.float32,
        device=torch.device("cpu"),
        sample_packing=True,
    )
    ref = RefWorker.sharing_policy(policy)
    reference, update = [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        batch["base_action_log_probs"] = ref.compute_logprobs(batch, 4)
        reference.append(time.perf_counter() - start)
        start = time.perf_counter()
        policy.ppo_train(batch, batch.batch_size, 2)
        update.append(time.perf_counter() - start)
        print(f"reference forward {reference[-1]:.2f} s, update {update[-1]:.2f} s", flush=True)
    measured = slice(1, None) if args.rounds > 1 else slice(None)
    print(
        f"median reference forward {statistics.median(reference[measured]):.2f} s, "
        f"update {statistics.median(update[measured]):.2f} s"
    )


if __name__ == "__main__":
    main()
