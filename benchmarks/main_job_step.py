"""Step time of the main job's recipe on one device: generation with the hf engine, then the policy update.

    .venv/bin/python benchmarks/main_job_step.py                          # the default model, trainer.device=auto
    python benchmarks/main_job_step.py --model FOLDER --random-weights    # a GPU machine without the model

The shapes are the main job's (`examples/mcp/run_grpo.sh`): 4 questions x 4 samples, each prompt a ~650-token system
prompt with demonstrations that all rows share plus its own question, 3 turns of 96 new tokens at temperature 0.4 with
a 40-token tool result between turns, LoRA rank 32 (alpha 64) on SmolLM2-135M-Instruct, sample packing, micro-batches of
2 rows for the update and 4 for the reference forward of the KL loss. No MCP server runs: the tool results are random
tokens, and every turn runs its 96 tokens (EOS ignored), so the work per step is fixed. The device and dtype follow
`trainer.device` / `trainer.bf16` (`--device`, `--bf16`): bf16 on a GPU, fp32 on the CPU unless set.

`--random-weights` builds the model from the config in `--model` with random weights (seeded), for a machine that has
the tokenizer and config but not the weights (the GPU check); the step time does not depend on the weights' values.

Prints one line per step (the first is a warm-up: CUDA kernels, allocator) and the medians of the others: generation
seconds and tokens/s, reference forward and policy update seconds, and peak memory (GPU: `max_memory_allocated`; CPU:
the process's peak RSS).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from skyrl_train.config.schema import AlgorithmConfig, LoraConfig, ModelConfig, OptimizerConfig, PolicyConfig
from skyrl_train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
from skyrl_train.inference_engines import HFInferenceEngine, SamplingParams
from skyrl_train.models import DEFAULT_MODEL, load_tokenizer, resolve_model_path
from skyrl_train.utils.device import resolve_device, training_dtype
from skyrl_train.utils.memory import PeakRSS
from skyrl_train.workers import PolicyWorker, RefWorker

OBSERVATION_TOKENS = 40


def random_weights_model(source: str, out_dir: Path, seed: int = 0) -> str:
    """A folder with `source`'s config and tokenizer and random weights (fp32)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source), dtype=torch.float32)
    model.save_pretrained(out_dir)
    load_tokenizer(source).save_pretrained(out_dir)
    return str(out_dir)


def make_prompts(args: argparse.Namespace, vocab: int, generator: torch.Generator) -> list[list[int]]:
    shared = torch.randint(1, vocab, (args.shared_tokens,), generator=generator).tolist()
    prompts = []
    for _ in range(args.prompts):
        question = torch.randint(1, vocab, (args.question_tokens,), generator=generator).tolist()
        prompts += [shared + question] * args.samples
    return prompts


async def rollout(engine, prompt: list[int], args, vocab: int, seed: int) -> tuple[list[int], list[int]]:
    """One agent loop: `--turns` generations, a random tool result between them. Returns (response ids, loss mask)."""
    generator = torch.Generator().manual_seed(seed)
    response, mask = [], []
    for turn in range(args.turns):
        params = SamplingParams(
            temperature=0.4,
            max_generate_length=args.new_tokens,
            seed=seed * 100 + turn,
            additional_kwargs={"ignore_eos": True},
        )
        out = await engine.generate({"prompt_token_ids": [prompt + response], "sampling_params": params})
        response += out["response_ids"][0]
        mask += [1] * len(out["response_ids"][0])
        if turn < args.turns - 1:
            observation = torch.randint(1, vocab, (OBSERVATION_TOKENS,), generator=generator).tolist()
            response += observation
            mask += [0] * len(observation)
    return response, mask


async def generate(engine, prompts, args, vocab: int, step: int):
    await engine.wake_up()
    try:
        loops = [rollout(engine, p, args, vocab, seed=step * 1000 + i) for i, p in enumerate(prompts)]
        return await asyncio.gather(*loops)
    finally:
        await engine.sleep()


def peak_memory_gb(device: torch.device, rss: PeakRSS) -> float:
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 1e9
        torch.cuda.reset_peak_memory_stats(device)
        return peak
    return rss.metrics().get("memory/peak_rss_gb", float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model path or alias (config and tokenizer)")
    parser.add_argument("--random-weights", action="store_true", help="random weights from the model's config")
    parser.add_argument("--device", default="auto", help="as trainer.device: auto, cpu, cuda, cuda:N")
    parser.add_argument("--bf16", choices=["auto", "true", "false"], default="auto", help="as trainer.bf16")
    parser.add_argument("--steps", type=int, default=3, help="measured steps, after one warm-up step")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--shared-tokens", type=int, default=650)
    parser.add_argument("--question-tokens", type=int, default=30)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write the per-step figures and the medians here")
    args = parser.parse_args()

    device = resolve_device(args.device)
    dtype = training_dtype({"auto": None, "true": True, "false": False}[args.bf16], device)
    with tempfile.TemporaryDirectory() as tmp:
        path = random_weights_model(args.model, Path(tmp)) if args.random_weights else resolve_model_path(args.model)
        torch.manual_seed(0)
        policy = PolicyWorker(
            PolicyConfig(
                model=ModelConfig(path=path, lora=LoraConfig(rank=args.lora_rank, alpha=2 * args.lora_rank)),
                optimizer_config=OptimizerConfig(lr=3e-4, scheduler="constant"),
            ),
            AlgorithmConfig(use_kl_loss=True, kl_loss_coef=0.01, kl_estimator_type="k3"),
            temperature=0.4,
            dtype=dtype,
            device=device,
            sample_packing=True,
        )
        tokenizer = load_tokenizer(path)
    ref = RefWorker.sharing_policy(policy)
    engine = HFInferenceEngine(policy.model, tokenizer, max_num_seqs=32, seed=0)
    vocab = policy.model.config.vocab_size
    prompts = make_prompts(args, vocab, torch.Generator().manual_seed(0))
    rss = PeakRSS()
    rss.start()
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), {dtype}, "
        f"model {args.model}{' (random weights)' if args.random_weights else ''}, LoRA rank {args.lora_rank}, "
        f"{len(prompts)} rows x {args.turns} turns x {args.new_tokens} tokens, torch {torch.__version__}",
        flush=True,
    )
    steps = []
    for step in range(args.steps + 1):
        start = time.perf_counter()
        trajectories = asyncio.run(generate(engine, prompts, args, vocab, step))
        generation = time.perf_counter() - start
        responses, masks = zip(*trajectories, strict=True)
        batch = convert_prompts_responses_to_batch_tensors(
            tokenizer.pad_token_id, prompts, list(responses), [0.0] * len(prompts), list(masks)
        )
        batch["advantages"] = torch.randn(batch["loss_mask"].shape) * batch["loss_mask"]
        start = time.perf_counter()
        batch["base_action_log_probs"] = ref.compute_logprobs(batch, 4)
        reference = time.perf_counter() - start
        start = time.perf_counter()
        metrics = policy.ppo_train(batch, batch.batch_size, 2)
        update = time.perf_counter() - start
        tokens = sum(sum(mask) for mask in masks)
        row = {
            "step": step,
            "generate_s": generation,
            "rollout_tokens_per_s": tokens / generation,
            "ref_forward_s": reference,
            "policy_update_s": update,
            "step_s": generation + reference + update,
            "peak_memory_gb": peak_memory_gb(device, rss),
            "grad_norm": metrics["policy/grad_norm"],
        }
        steps.append(row)
        print(("warm-up " if step == 0 else "") + json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)
    measured = steps[1:] or steps
    medians = {key: statistics.median(row[key] for row in measured) for key in measured[0] if key != "step"}
    print("median " + json.dumps({k: round(v, 3) for k, v in medians.items()}), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "steps": steps}, indent=1))
    asyncio.run(engine.teardown())


if __name__ == "__main__":
    main()
