"""`VLLMEngine`: one vLLM ``AsyncLLM`` serving token ids, the class of each engine Ray actor (`ray_engine`).

Every request goes in as a ``TokensPrompt`` and comes back as the exact sampled ids, the text (special tokens skipped,
ending at a matched stop string), the stop reason and, when asked, each sampled token's logprob (see `translate`).

Requests in flight can be aborted (`abort_generation`): each returns the tokens generated so far with stop reason
"abort". A colocated engine (sleep level given) frees its memory with `sleep` and takes it back with `wake_up`;
vLLM's CPU build has no sleep mode (`Platform.is_sleep_mode_available()` is False there), which
`ray_engine.create_vllm_engines` refuses before any engine starts.

Weights arrive as `skyrl_train.weight_sync` requests (`update_named_weights`): a LoRA adapter folder is loaded as a
vLLM LoRA request that every later request uses; broadcast and CUDA IPC chunks are received and loaded by every
worker through the worker extension (`worker_extension`). Each response reports the weight version it was generated
with.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from skyrl_train.inference_engines.base import InferenceEngineOutput, SamplingParams
from skyrl_train.inference_engines.vllm.translate import (
    logprobs_follow_contract,
    sampled_token_logprobs,
    stop_reason,
    vllm_sampling_kwargs,
)

__all__ = ["VLLMEngine"]

logger = logging.getLogger(__name__)

LORA_NAME = "skyrl-policy-lora"
LORA_ID = 1


class VLLMEngine:
    """An ``AsyncLLM`` built from `engine_kwargs` (`engine_config.engine_kwargs`).

    Args:
        engine_kwargs: `vllm.AsyncEngineArgs` keyword arguments.
        sleep_level: vLLM sleep level used by `sleep` (colocated engines), or None when the engine never sleeps.
    """

    def __init__(self, engine_kwargs: dict[str, Any], sleep_level: int | None = None):
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        if sleep_level is not None and not engine_kwargs.get("enable_sleep_mode"):
            raise ValueError("a sleep level needs enable_sleep_mode=True in the engine arguments")
        self.llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_kwargs))
        self.sleep_level = sleep_level
        self._request_ids = itertools.count()
        self._in_flight: set[str] = set()
        self._lora_request = None
        self._warned_logprobs = False
        self._weights_to_finish = False
        self._finish_lock = asyncio.Lock()
        self.weight_version = 0
        """The version of the weights requests are served with (`WeightUpdateRequest.weight_version`); 0 = the
        weights the engine loaded."""

    async def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> InferenceEngineOutput:
        """One response per prompt, in order (the prompts run concurrently in vLLM's batch)."""
        from vllm import SamplingParams as VLLMSamplingParams

        if params.logprobs is not None and not logprobs_follow_contract(params) and not self._warned_logprobs:
            self._warned_logprobs = True
            logger.warning(
                "sampling with truncation or penalties (top_k=%s, top_p=%s, min_p=%s, repetition_penalty=%s): "
                "vLLM reports logprobs of the processed distribution, not log_softmax(logits / T)",
                params.top_k,
                params.top_p,
                params.min_p,
                params.repetition_penalty,
            )
        vllm_params = VLLMSamplingParams(**vllm_sampling_kwargs(params))
        await self._finish_weight_update()
        version = self.weight_version
        results = await asyncio.gather(*(self._generate_one(ids, vllm_params) for ids in prompt_token_ids))
        return InferenceEngineOutput(
            responses=[r.text for r in results],
            response_ids=[list(r.token_ids) for r in results],
            stop_reasons=[stop_reason(r.finish_reason) for r in results],
            response_logprobs=(
                None if params.logprobs is None else [sampled_token_logprobs(r.token_ids, r.logprobs) for r in results]
            ),
            weight_versions=[version] * len(results),
        )

    async def _generate_one(self, prompt_token_ids: list[int], vllm_params):
        from vllm.inputs import TokensPrompt

        request_id = f"skyrl-{next(self._request_ids)}"
        self._in_flight.add(request_id)
        final = None
        try:
            async for output in self.llm.generate(
                TokensPrompt(prompt_token_ids=list(prompt_token_ids)),
                vllm_params,
                request_id,
                lora_request=self._lora_request,
            ):
                final = output
        finally:
            self._in_flight.discard(request_id)
        if final is None:
            raise RuntimeError(f"vLLM returned no output for request {request_id}")
        return final.outputs[0]

    async def abort_generation(self) -> None:
        """Abort every request in flight; each returns its tokens so far with stop reason "abort"."""
        if self._in_flight:
            await self.llm.abort(list(self._in_flight))

    async def sleep(self) -> None:
        if self.sleep_level is None:
            raise RuntimeError("this vLLM engine was started without sleep mode (it is not colocated)")
        if self._in_flight:
            logger.warning("putting the engine to sleep with %d requests in flight", len(self._in_flight))
        await self.llm.reset_prefix_cache()
        await self.llm.sleep(level=self.sleep_level)

    async def wake_up(self, tags: list[str] | None = None) -> None:
        if self.sleep_level is None:
            raise RuntimeError("this vLLM engine was started without sleep mode (it is not colocated)")
        await self.llm.wake_up(tags)

    async def reset_prefix_cache(self) -> None:
        await self.llm.reset_prefix_cache()

    # -- weight sync (the receiving side of `skyrl_train.weight_sync`; requests arrive in their in-job form) -------

    async def init_weight_update_communicator(self, info: dict[str, Any]) -> None:
        """Every worker joins the weight-update group (`WeightSyncInitInfo` JSON) as rank offset + its rank."""
        await self.llm.collective_rpc("init_weight_update_communicator", args=(info,))

    async def update_named_weights(self, request: dict[str, Any]) -> None:
        """Apply a `WeightUpdateRequest` (its in-job form, `to_rpc`, from this job's trainer over Ray): load a LoRA
        adapter folder, or have every worker receive a broadcast or CUDA IPC chunk and load it; then generate with
        (and report) its weight version, with no cached prefix computed before."""
        from skyrl_train.types.weight_sync_requests import LoraLoadRequest, WeightUpdateRequest

        update = WeightUpdateRequest.from_rpc(request)
        if isinstance(update, LoraLoadRequest):
            await self._load_lora_adapter(update.lora_path)
        elif update.type in ("broadcast", "cuda_ipc"):
            await self.llm.collective_rpc("receive_weights", args=(request,))
            self._weights_to_finish = True  # a sync may come in several chunks; the next generation completes it
        self.weight_version = update.weight_version
        await self.llm.reset_prefix_cache()

    async def _finish_weight_update(self) -> None:
        """Have every worker process the weights received since the last generation (see `worker_extension`)."""
        async with self._finish_lock:
            if self._weights_to_finish:
                await self.llm.collective_rpc("finalize_weight_reload")
                self._weights_to_finish = False

    async def destroy_weights_update_group(self) -> None:
        await self.llm.collective_rpc("destroy_weights_update_group")

    async def _load_lora_adapter(self, path: str) -> None:
        """Serve every later request with the peft adapter in folder `path`, replacing the previous one in place
        (one LoRA slot, one id)."""
        from vllm.lora.request import LoRARequest

        request = LoRARequest(LORA_NAME, LORA_ID, path, load_inplace=True)
        if not await self.llm.add_lora(request):
            raise RuntimeError(f"vLLM could not load the LoRA adapter in {path}")
        self._lora_request = request

    def shutdown(self) -> None:
        self.llm.shutdown()
