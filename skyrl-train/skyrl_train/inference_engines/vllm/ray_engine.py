"""vLLM engines as Ray actors behind the `InferenceEngineInterface`: `RayVLLMEngine`, started by `create_vllm_engines`.

One `RayVLLMEngine` is one engine actor (`engine.VLLMEngine`); several go behind `InferenceEngineClient`, which routes
each episode to one engine (its prefix cache) and fans control calls and weight syncs out. `sleep` / `wake_up` reach
the actor only when the engine is colocated (it then shares devices with the trainer and sleeps through every
update); an engine with devices of its own keeps its memory, so both are no-ops for it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from skyrl_train.inference_engines.base import (
    InferenceEngineInput,
    InferenceEngineInterface,
    InferenceEngineOutput,
    SamplingParams,
    prompt_token_ids,
)
from skyrl_train.inference_engines.vllm.engine_config import (
    engine_bundles,
    engine_kwargs,
    sleep_level,
)
from skyrl_train.utils.ray_placement import reserve_placement_group

if TYPE_CHECKING:
    from skyrl_train.types.weight_sync_init_info import WeightSyncInitInfo
    from skyrl_train.types.weight_sync_requests import WeightUpdateRequest

__all__ = ["RayVLLMEngine", "create_vllm_engines"]

logger = logging.getLogger(__name__)


class RayVLLMEngine(InferenceEngineInterface):
    """One `VLLMEngine` Ray actor.

    Args:
        actor: the engine actor (a ``ray.remote(VLLMEngine)`` handle), ready.
        tokenizer: the model's tokenizer (chat template for `prompts` inputs).
        colocated: the engine sleeps through the trainer's turn (`sleep` / `wake_up` reach it).
        tensor_parallel_size: workers of the engine (its ranks in the weight-update group).
        placement_group: a placement group made for this engine alone, removed by `teardown`.
    """

    def __init__(
        self, actor: Any, tokenizer, *, colocated: bool, tensor_parallel_size: int = 1, placement_group: Any = None
    ):
        self.actor = actor
        self.tokenizer = tokenizer
        self.colocated = colocated
        self._tp = tensor_parallel_size
        self._placement_group = placement_group

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

    async def init_weight_update_communicator(self, info: WeightSyncInitInfo) -> None:
        await self.actor.init_weight_update_communicator.remote(info.to_json())

    async def update_named_weights(self, request: WeightUpdateRequest) -> None:
        await self.actor.update_named_weights.remote(request.to_rpc())

    async def destroy_weights_update_group(self) -> None:
        await self.actor.destroy_weights_update_group.remote()

    async def teardown(self) -> None:
        """Shut the engine down, kill its actor and remove its own placement group."""
        import ray
        from ray.util.placement_group import remove_placement_group

        try:
            await self.actor.shutdown.remote()
        except Exception as error:  # a dead engine must not keep its actor or devices
            logger.warning("vLLM engine shutdown failed: %r", error)
        ray.kill(self.actor)
        if self._placement_group is not None:
            remove_placement_group(self._placement_group)
            self._placement_group = None


def create_vllm_engines(
    cfg: Any,
    tokenizer,
    *,
    policy_placement_group: Any = None,
    policy_bundles: tuple[int, ...] | None = None,
) -> list[RayVLLMEngine]:
    """Start `generator.num_inference_engines` engines as the config says and wait until they are ready.

    Colocated engines (``trainer.placement.colocate_all``) go into ``policy_placement_group`` (engine i in bundle
    ``policy_bundles[i]``, the bundle of fsdp2 policy rank i); with the policy in this process (``single``) each
    gets a one-device group of its own and asks for the same share of it. Engines that are not colocated get a
    placement group of their own with all their devices.

    Raises:
        ValueError: colocated engines on a cluster without GPUs (vLLM's CPU build has no sleep mode).
        TimeoutError: the cluster cannot hold an engine's own placement group (``reserve_placement_group``: the
            message names the bundle asked for and the cluster's resources).

    On failure the engines already started are killed and their placement groups removed.
    """
    import ray
    from ray.util.placement_group import remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from skyrl_train.inference_engines.vllm.engine import VLLMEngine
    from skyrl_train.models import resolve_model_path
    from skyrl_train.utils.ray_cluster import init_ray

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
    tp = g.inference_engine_tensor_parallel_size
    model_path = resolve_model_path(g.model_name)
    remote_engine = ray.remote(VLLMEngine)
    specs = engine_bundles(g.num_inference_engines, tp, colocated=colocated, use_gpu=use_gpu)
    engines, own_groups = [], []
    try:
        for index, spec in enumerate(specs):
            own_group = None
            if colocated and policy_placement_group is not None:
                group, bundle_index = policy_placement_group, policy_bundles[index]
            else:
                group = own_group = reserve_placement_group(
                    [spec.bundle],
                    purpose=f"vLLM engine {index} (of generator.num_inference_engines={len(specs)})",
                    remedy="Lower generator.num_inference_engines or generator.inference_engine_tensor_parallel_size, "
                    "or add nodes.",
                )
                own_groups.append(own_group)
                bundle_index = 0
            actor = remote_engine.options(
                num_cpus=spec.num_cpus,
                num_gpus=spec.num_gpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle_index),
            ).remote(
                engine_kwargs(g, model_path, lora_rank=lora_rank, sleep=colocated, seed=t.seed + index),
                sleep_level(lora_rank) if colocated else None,
            )
            engines.append(
                RayVLLMEngine(actor, tokenizer, colocated=colocated, tensor_parallel_size=tp, placement_group=own_group)
            )
        ray.get([engine.actor.__ray_ready__.remote() for engine in engines])
    except BaseException:  # nothing started stays alive or reserved
        for engine in engines:
            ray.kill(engine.actor)
        for own_group in own_groups:
            remove_placement_group(own_group)
        raise
    logger.info(
        "%d vLLM engine(s) ready (%s, tensor parallel %d)",
        len(engines),
        "colocated" if colocated else "own devices",
        tp,
    )
    return engines
