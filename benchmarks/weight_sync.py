"""Time of one weight sync from a trainer-side policy to servers over HTTP (`python -m skyrl_train.serve`'s routes),
full weights by gloo broadcast and a LoRA adapter by folder.

    .venv/bin/python benchmarks/weight_sync.py --servers 2 --lora-rank 32 --repeats 3

The servers run in this process on their own sockets and engines (each its own copy of the model), as separate
`python -m skyrl_train.serve` processes would, so the transfer goes through real HTTP requests and a real gloo
group over loopback. For each mode the median of `--repeats` syncs (after one untimed sync that forms the group) is
printed with the bytes sent per server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time

from skyrl_train.config.schema import AlgorithmConfig, LoraConfig, ModelConfig, PolicyConfig
from skyrl_train.inference_engines.client import InferenceEngineClient
from skyrl_train.inference_engines.remote import RemoteInferenceEngine
from skyrl_train.models import DEFAULT_MODEL, load_tokenizer
from skyrl_train.testing import TEST_CONTROL_TOKEN, served_model
from skyrl_train.weight_sync import WeightSyncSender
from skyrl_train.workers import PolicyWorker


async def time_syncs(sender: WeightSyncSender, repeats: int) -> float:
    await sender.sync(weight_version=0)
    times = []
    for version in range(1, repeats + 1):
        start = time.perf_counter()
        await sender.sync(weight_version=version)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def main(args: argparse.Namespace) -> None:
    tokenizer = load_tokenizer(args.model)
    async with contextlib.AsyncExitStack() as stack:
        adapters = stack.enter_context(tempfile.TemporaryDirectory())  # the servers' --lora-root
        servers = [
            await stack.enter_async_context(served_model(args.model, tokenizer, "policy", lora_root=adapters))
            for _ in range(args.servers)
        ]
        for lora_rank in (0, args.lora_rank):
            config = PolicyConfig(
                model=ModelConfig(path=args.model, lora=LoraConfig(rank=lora_rank, alpha=2 * lora_rank))
            )
            policy = PolicyWorker(config, AlgorithmConfig())
            state = policy.trainable_state_dict()
            size = sum(t.numel() * t.element_size() for t in state.values())
            engines = [
                RemoteInferenceEngine(server.url, "policy", tokenizer, control_token=TEST_CONTROL_TOKEN)
                for server, _ in servers
            ]
            with tempfile.TemporaryDirectory(dir=adapters) as folder:
                sender = WeightSyncSender(
                    InferenceEngineClient(engines),
                    policy,
                    "lora" if lora_rank else "broadcast",
                    backend="gloo",
                    lora_config=config.model.lora,
                    base_model_path=args.model,
                    lora_sync_path=folder,
                )
                seconds = await time_syncs(sender, args.repeats)
                await sender.close()
            for engine in engines:
                await engine.teardown()
            label = f"LoRA rank {lora_rank}" if lora_rank else "full weights"
            print(
                f"{label:>14}: {len(state)} tensors, {size / 2**20:.1f} MiB per server, {args.servers} server(s): "
                f"{seconds:.2f} s per sync (median of {args.repeats})"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
