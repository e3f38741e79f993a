"""Multi-turn MCP rollouts: the rollout engine vs plain batched `generate`, and what the env and MCP cost.

    /work/wt/heavy .venv/bin/python benchmarks/mcp_rollout.py [--loops 32] [--rounds 2] [--threads 1]

The main job's setting (`examples/mcp/run_grpo.sh`): SmolLM2-135M-Instruct (fp32, local alias) with a fresh LoRA
adapter, closing-price tasks on the bundled market-data MCP server (a real process over MCP stdio), its two
demonstrations, at most 3 turns of at most 64 tokens each, temperature 0.7, turns ending at ``</tool_call>``.
`--loops` agent loops (distinct tasks) run on each side, `--rounds` times, alternating the sides:

- engine: `SkyRLGymGenerator` over `HFInferenceEngine` (continuous batching, prefix cache), one async agent loop per
  task, envs stepped while other loops generate;
- generate: the same envs, turn by turn in lockstep: every open conversation's tokens (left-padded) go into one
  `model.generate` call, then every env steps, then the next turn (what a trainer without an engine does).

Useful output tokens are the sampled ones (the loss-masked tokens of the engine's rows; up to and including the stop
string or EOS for `generate`). It prints useful tokens/s of both, their ratio, and the overheads of the engine side:
the share of the generation wall time in which the engine had no work (every loop was waiting on its env or MCP
server), the summed env-call time (init / step / close, including MCP round trips), and `parse_tool_calls` messages
per second over the rollouts' own messages.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

import skyrl_gym
from skyrl_integrations.datasets.rule_based import main as generate_dataset
from skyrl_integrations.mcp.client import close_all_sessions
from skyrl_integrations.tool_parser import parse_tool_calls
from skyrl_train.config import load_config
from skyrl_train.dataset import PromptDataset
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.generators.utils import ObservationEncoder, encode_chat
from skyrl_train.inference_engines.hf.engine import HFInferenceEngine
from skyrl_train.models import load_causal_lm, load_tokenizer
from skyrl_train.models.lora import apply_lora
from skyrl_train.trainer_utils import prepare_generator_input

REPO = Path(__file__).resolve().parents[1]


def main_job_config(data: Path):
    """The generator and env settings of the main job (`examples/mcp/grpo.yaml`)."""
    return load_config(
        [
            f"data.train_data=[{data}]",
            "environment.env_class=mcp_tool",
            f"+environment.skyrl_gym.mcp_tool.demonstrations={REPO / 'examples/mcp/demonstrations.json'}",
            "+environment.skyrl_gym.mcp_tool.max_calls_per_turn=1",
            "trainer.max_prompt_length=640",
            "generator.max_input_length=1024",
            "generator.max_turns=3",
            "generator.sampling_params.max_generate_length=64",
            "generator.sampling_params.temperature=0.7",
            "generator.sampling_params.stop=['</tool_call>']",
            "trainer.policy.model.lora.rank=32",
            "trainer.policy.model.lora.alpha=64",
        ]
    )


class EngineClock:
    """Seconds the engine's scheduler spent in `ContinuousBatcher.step` (its busy time)."""

    def __init__(self, engine: HFInferenceEngine):
        self.busy = 0.0
        step = engine._batcher.step

        @functools.wraps(step)
        def timed():
            start = time.perf_counter()
            try:
                step()
            finally:
                self.busy += time.perf_counter() - start

        engine._batcher.step = timed


class EnvClock:
    """Summed seconds of env calls (init / step / close, async hooks included) of envs made via skyrl_gym."""

    def __init__(self):
        self.seconds = 0.0
        self.messages: list[str] = []
        make = skyrl_gym.make

        def timed_make(*args, **kwargs):
            env = make(*args, **kwargs)
            for name in ("init_async", "step_async", "close", "init", "step"):
                if hasattr(env, name):
                    setattr(env, name, self._timed(getattr(env, name), name))
            return env

        skyrl_gym.make = timed_make

    def _timed(self, method, name):
        if asyncio.iscoroutinefunction(method):

            async def timed_async(*args):
                if name == "step_async":
                    self.messages.append(args[0])
                start = time.perf_counter()
                try:
                    return await method(*args)
                finally:
                    self.seconds += time.perf_counter() - start

            return timed_async

        def timed(*args):
            start = time.perf_counter()
            try:
                return method(*args)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


async def engine_side(cfg, model, tokenizer, batch, env_clock: EnvClock, threads: int | None) -> dict:
    engine = HFInferenceEngine(model, tokenizer, max_num_seqs=len(batch["prompt"]), seed=0, num_threads=threads)
    clock = EngineClock(engine)
    generator = SkyRLGymGenerator(cfg.generator, cfg.environment.skyrl_gym, engine, tokenizer, seed=cfg.trainer.seed)
    generator_input, _ = prepare_generator_input(batch, 1, cfg.generator.sampling_params, "mcp_tool", "train", 1)
    env_before = env_clock.seconds
    start = time.perf_counter()
    output = await generator.generate(generator_input)
    wall = time.perf_counter() - start
    await engine.teardown()
    useful = sum(sum(mask) for mask in output["loss_masks"])
    return {
        "wall": wall,
        "useful_tokens": useful,
        "engine_idle_share": max(wall - clock.busy, 0.0) / wall,
        "env_seconds": env_clock.seconds - env_before,
        "reward": statistics.mean(sum(r) for r in output["rewards"]),
    }


async def generate_side(cfg, model, tokenizer, batch) -> dict:
    """Lockstep turns: one padded `model.generate` over every open conversation, then every env steps."""
    g = cfg.generator
    params = g.sampling_params
    envs = [
        skyrl_gym.make(
            env_class or "mcp_tool",
            env_config=cfg.environment.skyrl_gym.get_env_config("mcp_tool"),
            extras={**extras, "max_turns": g.max_turns},
        )
        for env_class, extras in zip(batch["env_class"], batch["env_extras"], strict=True)
    ]
    encoder = ObservationEncoder(tokenizer)
    start = time.perf_counter()
    initial = await asyncio.gather(*(env.init_async(prompt) for env, prompt in zip(envs, batch["prompt"], strict=True)))
    contexts = [encode_chat(tokenizer, messages, True) for messages, _ in initial]
    open_rows, useful, rewards = list(range(len(envs))), 0, [0.0] * len(envs)
    generator = torch.Generator().manual_seed(0)
    model.eval()
    while open_rows:
        width = max(len(contexts[i]) for i in open_rows)
        ids = torch.full((len(open_rows), width), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(open_rows):
            ids[row, width - len(contexts[i]) :] = torch.tensor(contexts[i])
            mask[row, width - len(contexts[i]) :] = 1
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=generator)))
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=params.max_generate_length,
                do_sample=True,
                temperature=params.temperature,
                top_p=1.0,
                top_k=0,
                stop_strings=list(params.stop),
                tokenizer=tokenizer,
                pad_token_id=tokenizer.pad_token_id,
            )[:, width:]
        texts, responses = [], []
        for row in range(len(open_rows)):
            response = out[row].tolist()
            text = tokenizer.decode(response, skip_special_tokens=True)
            end = _response_end(response, text, tokenizer, list(params.stop))
            responses.append(response[:end])
            texts.append(tokenizer.decode(response[:end], skip_special_tokens=True))
        useful += sum(len(r) for r in responses)
        steps = await asyncio.gather(*(envs[i].step_async(t) for i, t in zip(open_rows, texts, strict=True)))
        still_open = []
        for i, response, step in zip(open_rows, responses, steps, strict=True):
            rewards[i] += float(step["reward"] or 0.0)
            contexts[i] = contexts[i] + response
            if step["done"] or len(contexts[i]) > g.max_input_length:
                continue
            if contexts[i][-1] != tokenizer.eos_token_id:
                contexts[i].append(tokenizer.eos_token_id)  # close the turn as the chat template would
            contexts[i] += encoder.encode(step["observations"], add_generation_prompt=True)
            still_open.append(i)
        open_rows = still_open
    wall = time.perf_counter() - start
    for env in envs:
        env.close()
    return {"wall": wall, "useful_tokens": useful, "reward": statistics.mean(rewards)}


def _response_end(response: list[int], text: str, tokenizer, stops: list[str]) -> int:
    """Tokens up to the first EOS (kept) or the token completing a stop string, whichever comes first."""
    for n in range(1, len(response) + 1):
        if response[n - 1] == tokenizer.eos_token_id:
            return n
        if stops and any(s in tokenizer.decode(response[max(0, n - 12) : n]) for s in stops):
            return n
    return len(response)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loops", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    workdir = Path(tempfile.mkdtemp(prefix="mcp_rollout_"))
    generate_dataset(
        ["--output-dir", str(workdir), "--train-size", str(args.loops * args.rounds), "--val-size", "1"]
        + ["--servers", "market", "--complexities", "single", "--templates", "close_price", "--seed", "0", "--no-jsonl"]
    )
    cfg = main_job_config(workdir / "train.parquet")
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    torch.manual_seed(0)
    model = apply_lora(load_causal_lm("smollm2-135m-instruct"), cfg.trainer.policy.model.lora, "CAUSAL_LM").eval()
    dataset = PromptDataset([str(workdir / "train.parquet")], tokenizer, 640)
    env_clock = EnvClock()
    print(
        f"{args.loops} agent loops x {args.rounds} rounds; threads {torch.get_num_threads()}; "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results: dict[str, list[dict]] = {"engine": [], "generate": []}
    for round_ in range(args.rounds):
        rows = range(round_ * args.loops, (round_ + 1) * args.loops)
        batch = dataset.collate_fn([dataset[i] for i in rows])
        order = ["engine", "generate"] if round_ % 2 == 0 else ["generate", "engine"]
        for side in order:
            if side == "engine":
                result = asyncio.run(engine_side(cfg, model, tokenizer, batch, env_clock, args.threads))
            else:
                result = asyncio.run(generate_side(cfg, model, tokenizer, batch))
            results[side].append(result)
            print(
                f"  round {round_ + 1} {side:8s}: {json.dumps({k: round(v, 3) for k, v in result.items()})}", flush=True
            )
    close_all_sessions()

    def rate(side: str) -> float:
        return sum(r["useful_tokens"] for r in results[side]) / sum(r["wall"] for r in results[side])

    engine_rate, generate_rate = rate("engine"), rate("generate")
    print(
        f"\nuseful output tokens/s: engine {engine_rate:.1f}, batched generate {generate_rate:.1f}, "
        f"ratio {engine_rate / generate_rate:.2f}x"
    )
    idle = statistics.mean(r["engine_idle_share"] for r in results["engine"])
    env_seconds = statistics.mean(r["env_seconds"] for r in results["engine"])
    wall = statistics.mean(r["wall"] for r in results["engine"])
    print(
        f"engine side: generation wall {wall:.1f} s; engine idle (all loops waiting on env / MCP) {100 * idle:.1f}% "
        f"of it; env calls summed over loops {env_seconds:.1f} s ({env_seconds / args.loops:.2f} s per loop)"
    )
    messages = env_clock.messages * max(1, 20000 // max(len(env_clock.messages), 1))
    start = time.perf_counter()
    for message in messages:
        parse_tool_calls(message, None)
    print(
        f"parse_tool_calls: {len(messages) / (time.perf_counter() - start):.0f} messages/s over the rollouts' "
        f"{len(env_clock.messages)} model messages"
    )


if __name__ == "__main__":
    main()
