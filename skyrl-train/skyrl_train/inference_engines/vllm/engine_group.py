"""vLLM engines as Ray actors behind the `InferenceEngineInterface`; `create_vllm_engines` starts them.

`RayVLLMEngine` is one engine actor (`engine.VLLMEngine`); `VLLMEngineGroup` puts N of them behind one interface,
routing each call's prompts (`routing.EngineRouter`: by session id, so all turns of an episode reach one engine's
prefix cache) and gathering the results in input order. `sleep` / `wake_up` reach an engine only when it is
colocated (it then shares devices with the trainer and sleeps through every update); an engine with devices of its
own keeps its memory, so both are no-ops for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from skyrl_train.inference_engines.base import (
    InferenceEngineInput,
    InferenceEngineInterface,
    InferenceEngineOutput,
    SamplingParams,
    prompt_token_ids,
)
from skyrl_train.inference_engines.routing import EngineRouter
from skyrl_train.inference_engines.vllm.engine_config import engine_bundles, engine_env, engine_kwargs, sleep_level

__all__ = ["RayVLLMEngine", "VLLMEngineGroup", "create_vllm_engines"]

logger = logging.getLogger(__name__)

_OUTPUT_KEYS = ("responses", "response_ids", "stop_reasons", "response_logprobs")


class RayVLLMEngine(InferenceEngineInterface):
    """One `VLLMEngine` Ray actor behind the `InferenceEngineInterface`.

    Args:
        actor: the engine actor (a ``ray.remote(VLLMEngine)`` handle), ready.
        tokenizer: the model's tokenizer (chat template for `prompts` inputs).
        colocated: the engine sleeps through the trainer's turn (`sleep` / `wake_up` reach it).
        tensor_parallel_size: workers of the engine.
    """

    def __init__(self, actor: Any, tokenizer, *, colocated: bool, tensor_parallel_size: int = 1):
        self.actor = actor
        self.tokenizer = tokenizer
        self.colocated = colocated
        self._tp = tensor_parallel_size

    def tp_size(self) -> int:
        return self._tp

    async def generate(self, input_batch: InferenceEngineInput) -> InferenceEngineOutput:
        params = input_batch.get("sampling_params") or SamplingParams()
        return await self.actor.generate.remote(prompt_token_ids(input_batch, self.tokenizer), params)

    async def abort_generation(self) -> None:
        """Abort every request in flight (each returns its tokens so far, stop reason "abort")."""
        await self.actor.abort_generation.remote()

    async def sleep(self) -> None:
        """A colocated engine releases its memory (vLLM sleep); an engine on devices of its own keeps it."""
        if self.colocated:
            await self.actor.sleep.remote()

    async def wake_up(self, tags: list[str] | None = None) -> None:
        if self.colocated:
            await self.actor.wake_up.remote(tags)

    async def reset_prefix_cache(self) -> None:
        await self.actor.reset_prefix_cache.remote()

    async def load_lora_adapter(self, path: str) -> None:
        """Serve later requests with the peft adapter saved in folder `path` (readable from the engine's node)."""
        await self.actor.load_lora_adapter.remote(path)

    async def collective_rpc(self, method: str, *args: Any) -> list[Any]:
        """`method(*args)` of the worker extension on every worker of the engine."""
        return await self.actor.collective_rpc.remote(method, *args)

    async def teardown(self) -> None:
        """Shut the engine down and kill its actor."""
        import ray

        try:
            await self.actor.shutdown.remote()
        except Exception as error:  # a dead engine must not keep its actor alive
            logger.warning("vLLM engine shutdown failed: %r", error)
        ray.kill(self.actor)


class VLLMEngineGroup(InferenceEngineInterface):
    """`RayVLLMEngine`s serving one model, behind one interface: each call's prompts are routed over them
    (`routing.EngineRouter`) and the results gathered in input order; control calls fan out to every engine.
    `teardown` also removes the placement groups made for the engines."""

    def __init__(self, engines: list[RayVLLMEngine], placement_groups: list[Any] | None = None):
        self.engines = list(engines)
        self._placement_groups = list(placement_groups or [])
        self._router = EngineRouter(len(self.engines))

    @property
    def num_engines(self) -> int:
        return len(self.engines)

    @property
    def actors(self) -> list[Any]:
        """The engines' Ray actors, in engine order (for blocking calls from synchronous code)."""
        return [engine.actor for engine in self.engines]

    def tp_size(self) -> int:
        return self.engines[0].tp_size()

    async def generate(self, input_batch: InferenceEngineInput) -> InferenceEngineOutput:
        params = input_batch.get("sampling_params") or SamplingParams()
        prompts = prompt_token_ids(input_batch, self.engines[0].tokenizer)
        routes = self._router.route(len(prompts), input_batch.get("session_ids"))
        calls, order = [], []
        for engine, indices in zip(self.engines, routes, strict=True):
            if indices:
                batch = InferenceEngineInput(prompt_token_ids=[prompts[i] for i in indices], sampling_params=params)
                calls.append(engine.generate(batch))
                order.append(indices)
        results = await asyncio.gather(*calls)
        merged: dict[str, list] = {key: [None] * len(prompts) for key in _OUTPUT_KEYS}
        for indices, result in zip(order, results, strict=True):
            for key in _OUTPUT_KEYS:
                values = result[key]
                for position, index in enumerate(indices):
                    merged[key][index] = None if values is None else values[position]
        return InferenceEngineOutput(
            responses=merged["responses"],
            response_ids=merged["response_ids"],
            stop_reasons=merged["stop_reasons"],
            response_logprobs=None if params.logprobs is None else merged["response_logprobs"],
        )

    async def _every_engine(self, method: str, *args: Any) -> list[Any]:
        return list(await asyncio.gather(*(getattr(engine, method)(*args) for engine in self.engines)))

    async def abort_generation(self) -> None:
        await self._every_engine("abort_generation")

    async def sleep(self) -> None:
        await self._every_engine("sleep")

    async def wake_up(self, tags: list[str] | None = None) -> None:
        await self._every_engine("wake_up", tags)

    async def reset_prefix_cache(self) -> None:
        await self._every_engine("reset_prefix_cache")

    async def teardown(self) -> None:
        from ray.util.placement_group import remove_placement_group

        await self._every_engine("teardown")
        for group in self._placement_groups:
            remove_placement_group(group)
        self._placement_groups = []


def create_vllm_engines(
    cfg: Any,
    tokenizer,
    *,
    policy_placement_group: Any = None,
    policy_bundles: tuple[int, ...] | None = None,
) -> VLLMEngineGroup:
    """Start `generator.num_inference_engines` engines as the config says and wait until they are ready.

    Colocated engines (``trainer.placement.colocate_all``) go into ``policy_placement_group`` (engine i in bundle
    ``policy_bundles[i]``, the bundle of policy rank i), or into a group made here when the policy is not on Ray
    (``trainer.strategy=single``). Otherwise each engine gets a placement group of its own.

    Raises:
        ValueError: colocated engines on a cluster without GPUs (vLLM's CPU build has no sleep mode).
    """
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from skyrl_train.distributed.cluster import init_ray
    from skyrl_train.inference_engines.vllm.engine import VLLMEngine
    from skyrl_train.models import resolve_model_path

    g, t = cfg.generator, cfg.trainer
    init_ray()
    use_gpu = ray.cluster_resources().get("GPU", 0) > 0
    colocated = bool(t.placement.colocate_all)
    if colocated and not use_gpu:
        raise ValueError(
            "trainer.placement.colocate_all=true with generator.backend=vllm makes the engines sleep through every "
            "policy update, and vLLM's CPU build has no sleep mode (this Ray cluster has no GPU); set "
            "trainer.placement.colocate_all=false"
        )
    lora_rank = int(t.policy.model.lora.rank)
    bundles = engine_bundles(
        g.num_inference_engines, g.inference_engine_tensor_parallel_size, colocated=colocated, use_gpu=use_gpu
    )
    own_groups = []
    if colocated and policy_placement_group is None:
        policy_placement_group = placement_group([dict(b.bundle) for b in bundles], strategy="PACK")
        policy_bundles = tuple(range(len(bundles)))
        own_groups.append(policy_placement_group)
    model_path = resolve_model_path(g.model_name)
    env = engine_env(g)
    remote_engine = ray.remote(VLLMEngine)
    actors = []
    for index, spec in enumerate(bundles):
        if spec.shared:
            group, bundle_index = policy_placement_group, policy_bundles[index]
        else:
            group, bundle_index = placement_group([dict(spec.bundle)], strategy="PACK"), 0
            own_groups.append(group)
        kwargs = engine_kwargs(g, model_path, lora_rank=lora_rank, sleep=colocated, seed=t.seed + index)
        actors.append(
            remote_engine.options(
                num_cpus=spec.num_cpus,
                num_gpus=spec.num_gpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle_index),
                runtime_env={"env_vars": env},
            ).remote(kwargs, sleep_level(lora_rank) if colocated else None)
        )
    ray.get([actor.__ray_ready__.remote() for actor in actors])
    logger.info(
        "%d vLLM engine(s) ready (%s, tensor parallel %d)",
        len(actors),
        "colocated" if colocated else "own devices",
        g.inference_engine_tensor_parallel_size,
    )
    engines = [
        RayVLLMEngine(
            actor, tokenizer, colocated=colocated, tensor_parallel_size=g.inference_engine_tensor_parallel_size
        )
        for actor in actors
    ]
    return VLLMEngineGroup(engines, placement_groups=own_groups)
