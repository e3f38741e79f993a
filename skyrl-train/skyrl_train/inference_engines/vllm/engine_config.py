"""`generator.*` -> what each vLLM engine actor is built with: its engine arguments, sleep level and placement.

Pure (no vLLM, no Ray), so the CPU suite tests the translation.

Engine arguments follow upstream SkyRL: the `generator` keys map one-to-one onto vLLM's `AsyncEngineArgs`; with a
LoRA policy the engine gets ``enable_lora``, ``max_lora_rank = rank``, ``max_loras = 1`` and ``enforce_eager=False``
(upstream measured eager mode with LoRA at 2-3x slower generation on GPUs; vLLM's CPU build compiles nothing with
LoRA anyway); `generator.engine_init_kwargs` is applied last and wins. Two arguments are fixed by this fork:
``logprobs_mode="processed_logprobs"`` (see `translate`) and the worker extension that receives weight updates.

Placement (`engine_bundles`):

- colocated (``trainer.placement.colocate_all``): engine i runs in the bundle of policy rank i (one device per
  bundle; with the policy in the trainer's process, a one-device group of its own) and asks for `COLOCATED_SHARE`
  of it, like every colocated role; it sleeps while the trainer runs. Tensor parallelism is then 1 (a TP engine
  would need one bundle per shard, i.e. vLLM's Ray executor, which is not wired in);
- otherwise each engine has a placement group of its own with one bundle of TP devices (GPUs) and asks for all of
  it; on a CPU cluster that bundle is ``{"CPU": TP}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skyrl_train.utils.ray_placement import COLOCATED_SHARE

__all__ = ["WORKER_EXTENSION", "EngineBundle", "engine_bundles", "engine_kwargs", "sleep_level"]

WORKER_EXTENSION = "skyrl_train.inference_engines.vllm.worker_extension.WeightSyncWorkerExtension"
"""Qualified name of the class vLLM mixes into its workers (``worker_extension_cls``) for weight updates."""


def engine_kwargs(generator: Any, model_path: str, *, lora_rank: int, sleep: bool, seed: int) -> dict[str, Any]:
    """`AsyncEngineArgs` keyword arguments of one engine from a `GeneratorConfig` (upstream's mapping).

    ``sleep`` turns on vLLM's sleep mode (colocated engines); ``seed`` seeds the engine's sampler for requests that
    have no seed of their own.
    """
    g = generator
    kwargs: dict[str, Any] = {
        "model": model_path,
        "tokenizer": model_path,
        "dtype": g.model_dtype,
        "seed": seed,
        "tensor_parallel_size": g.inference_engine_tensor_parallel_size,
        "gpu_memory_utilization": g.gpu_memory_utilization,
        "max_num_seqs": g.max_num_seqs,
        "max_num_batched_tokens": g.max_num_batched_tokens,
        "enable_prefix_caching": g.enable_prefix_caching,
        "enable_chunked_prefill": g.enable_chunked_prefill,
        "enforce_eager": g.enforce_eager,
        "enable_sleep_mode": sleep,
        "logprobs_mode": "processed_logprobs",
        "worker_extension_cls": WORKER_EXTENSION,
    }
    if g.inference_engine_tensor_parallel_size > 1:
        # The engine actor holds all its TP devices (one bundle); vLLM's Ray executor would ask the placement group
        # for one more bundle per shard.
        kwargs["distributed_executor_backend"] = "mp"
    if lora_rank > 0:
        kwargs.update(
            enable_lora=True,
            max_lora_rank=lora_rank,
            max_loras=1,
            fully_sharded_loras=g.fully_sharded_loras,
            enforce_eager=False,
        )
    kwargs.update(g.engine_init_kwargs)
    return kwargs


def sleep_level(lora_rank: int) -> int:
    """vLLM sleep level of a colocated engine: 2 (drop weights and KV cache; full weights are re-sent after every
    update anyway) or, with LoRA, 1 (keep the unchanged base weights in CPU memory, drop the KV cache)."""
    return 1 if lora_rank > 0 else 2


@dataclass(frozen=True)
class EngineBundle:
    """What one engine actor asks of its bundle."""

    bundle: dict[str, float]
    """The bundle's resources (one device of the policy's group when colocated; else the engine's whole group)."""
    num_gpus: float
    num_cpus: float


def engine_bundles(
    num_engines: int, tensor_parallel_size: int, *, colocated: bool, use_gpu: bool
) -> list[EngineBundle]:
    """The bundle of each of ``num_engines`` engines and its share of it (see the module docstring).

    Raises:
        ValueError: colocated engines with tensor parallelism > 1.
    """
    tp = tensor_parallel_size
    if colocated:
        if tp != 1:
            raise ValueError(
                "generator.inference_engine_tensor_parallel_size > 1 with trainer.placement.colocate_all=true is not "
                "supported: a colocated engine runs in one device of the policy's placement group"
            )
        bundle = {"GPU": 1.0, "CPU": 1.0} if use_gpu else {"CPU": 1.0}
        return [EngineBundle(bundle, COLOCATED_SHARE if use_gpu else 0.0, COLOCATED_SHARE)] * num_engines
    bundle = {"GPU": float(tp), "CPU": float(tp)} if use_gpu else {"CPU": float(tp)}
    return [EngineBundle(bundle, bundle.get("GPU", 0.0), bundle["CPU"])] * num_engines
