"""What reusing shared prefixes saves: multi-turn GRPO rollouts through the engine's prefix cache and its
shared-prefix decoding, and the policy update's forward + backward over rows that share a prompt prefix.

    .venv/bin/python benchmarks/prefix_reuse.py --prompts 4 --samples 4 --shared-tokens 480

Rollouts: `--prompts` questions x `--samples` agent loops, each prompt = the same `--shared-tokens` system prompt +
its own `--question-tokens`; every loop runs `--turns` turns of `--new-tokens` tokens, appending its response and an
`--observation-tokens` observation before the next turn (token-in, token-out, as the generator does). Once with
`prefix_cache_bytes=0` and every row decoding against its own copy of the shared prefix, once with the default cache,
once with the default cache and shared-prefix decoding (the engine's default: the prefix's KV kept once and read once
per decode step); it prints wall time, how many prompt tokens were prefilled and the decode passes.

Update: the resulting batch shape (shared prefix + question + a `--turns`-turn response) through
`response_logprobs` with grad and a backward pass, with `share_prefix=False` and with the default.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import torch

from skyrl_train.inference_engines import HFInferenceEngine, SamplingParams
from skyrl_train.inference_engines.hf.engine import DEFAULT_PREFIX_CACHE_BYTES
from skyrl_train.models import DEFAULT_MODEL, load_causal_lm, load_tokenizer
from skyrl_train.workers import response_logprobs


def token_block(tokenizer, seed: int, length: int) -> list[int]:
    """`length` ordinary-text tokens, different for each seed."""
    ids = tokenizer(f"Record {seed}: the closing price was {seed * 7.31:.2f} and the volume {seed * 1931}. " * 64)
    return list(ids.input_ids[:length])


async def rollouts(engine: HFInferenceEngine, tokenizer, args: argparse.Namespace) -> tuple[float, list[list[int]]]:
    """Run every agent loop; return the wall time and each loop's final token sequence."""
    shared = token_block(tokenizer, 0, args.shared_tokens)
    params = SamplingParams(
        max_generate_length=args.new_tokens, temperature=1.0, additional_kwargs={"ignore_eos": True}
    )

    async def loop(question: int) -> list[int]:
        tokens = shared + token_block(tokenizer, 1000 + question, args.question_tokens)
        for turn in range(args.turns):
            output = await engine.generate({"prompt_token_ids": [tokens], "sampling_params": params})
            tokens = tokens + output["response_ids"][0]
            if turn + 1 < args.turns:
                tokens = tokens + token_block(tokenizer, 2000 + turn, args.observation_tokens)
        return tokens

    start = time.perf_counter()
    sequences = await asyncio.gather(*(loop(q) for q in range(args.prompts) for _ in range(args.samples)))
    return time.perf_counter() - start, sequences


def update_batch(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`[prompt | right-padded response]` rows, as the trainer lays them out (all prompts have the same length)."""
    width = max(len(s) for s in sequences)
    batch = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(batch)
    for row, tokens in enumerate(sequences):
        batch[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
    return batch, mask


def time_update(model, batch: torch.Tensor, mask: torch.Tensor, response_length: int, share_prefix: bool) -> float:
    model.zero_grad()
    start = time.perf_counter()
    logprobs, _ = response_logprobs(model, batch, mask, response_length, share_prefix=share_prefix)
    logprobs.sum().backward()
    return time.perf_counter() - start


async def main(args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    tokenizer = load_tokenizer(args.model)
    model = load_causal_lm(args.model, dtype=args.dtype)
    print(
        f"model={args.model} dtype={args.dtype} {args.prompts} prompts x {args.samples} samples, {args.turns} turns, "
        f"shared prefix {args.shared_tokens} + question {args.question_tokens} tokens, {args.new_tokens} new tokens "
        f"and {args.observation_tokens} observation tokens per turn, torch_threads={torch.get_num_threads()}"
    )
    model.eval()
    settings = [
        ("no prefix cache", 0, False),
        ("prefix cache", DEFAULT_PREFIX_CACHE_BYTES, False),
        ("+ shared decode", DEFAULT_PREFIX_CACHE_BYTES, True),
    ]
    for label, cache_bytes, shared_decode in settings:
        engine = HFInferenceEngine(
            model,
            tokenizer,
            max_num_seqs=64,
            seed=0,
            prefix_cache_bytes=cache_bytes,
            shared_prefix_decode=shared_decode,
        )
        elapsed, sequences = await rollouts(engine, tokenizer, args)
        stats = engine.stats
        await engine.teardown()
        print(
            f"rollouts, {label:15s}: {elapsed:7.2f} s, prompt tokens {stats.prompt_tokens}, of which from the "
            f"cache {stats.cached_prompt_tokens}; prefilled {stats.prefilled_tokens} tokens in "
            f"{stats.prefill_forward_passes} forward passes; {stats.decode_forward_passes} decode passes, "
            f"{stats.shared_prefix_decode_passes} reading a shared prefix once"
        )

    model.train()
    prompt_length = args.shared_tokens + args.question_tokens
    batch, mask = update_batch(sequences, tokenizer.pad_token_id)
    response_length = batch.shape[1] - prompt_length
    print(f"update batch: {batch.shape[0]} rows x {batch.shape[1]} tokens ({response_length} response columns)")
    for label, share in (("every row whole", False), ("shared prefix once", True)):
        elapsed = min(time_update(model, batch, mask, response_length, share) for _ in range(args.repeats))
        print(f"forward + backward, {label:18s}: {elapsed:7.2f} s")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model alias, local folder or hub id")
    parser.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4, help="agent loops per prompt (GRPO group size)")
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--shared-tokens", type=int, default=480, help="system prompt + demonstrations")
    parser.add_argument("--question-tokens", type=int, default=24)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--observation-tokens", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=1, help="update timings: best of this many")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
