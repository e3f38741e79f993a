"""`HFInferenceEngine`: the transformers backend, batching the requests of many concurrent agent loops.

Agent loops call `await engine.generate(...)` concurrently and at staggered times. Each call puts its prompts on
an inbox and awaits one future per prompt. A dedicated scheduler thread runs the torch work (torch releases the
GIL, so the event loop, env threads and tool servers keep running meanwhile): it moves the inbox into a
`ContinuousBatcher`, which prefills newcomers and advances every running sequence one token per shared forward
pass, and it resolves each future through its event loop's `call_soon_threadsafe` when that prompt finishes.

Sharing weights with the trainer (colocated mode): the engine holds the very module the trainer optimises (a plain
transformers model or a peft `PeftModel`, whose active adapter is then used); it never copies parameters, so there
is no weight sync step and generation always uses the current weights. The two take turns: while the engine has
work it puts the module in eval mode and runs every forward under `torch.no_grad()` on its own thread, and when
the batch drains it restores the module's previous train/eval mode. With a peft LoRA adapter, the engine decodes
with the adapter folded into copies of the base weights while it is busy (`lora_merge`), and with a `dtype` other
than the module's (bf16 over the trainer's fp32 weights on a CPU with AMX) with copies of every weight in that dtype
(`decode_weights`), and with float32 weights on the CPU its linear layers take decode-size inputs as ``(W @ xᵀ)ᵀ``,
which MKL reads faster (`few_row_linear`); it puts the module's own weights and layers back when the batch drains. The
trainer must not update the weights while a generation is in flight; `await engine.sleep()` waits for the in-flight
requests to finish and then refuses new ones until `await engine.wake_up()`, which makes that hand-over explicit.

Receiving weights (an engine in its own process, e.g. `python -m skyrl_train.serve`): `update_named_weights` applies
a `skyrl_train.weight_sync` request (broadcast tensors after `init_weight_update_communicator`, a LoRA adapter folder,
or CUDA IPC handles) once no request is in flight, holding new ones back meanwhile. Every response reports the
weight version it was generated with (`weight_versions`): the version of the last update applied before its prefill
(0 for the weights the engine started with; a version-only request labels the shared module's current weights).

Prefix caching: prompts reuse the KV of earlier sequences they start with (see `prefix_cache`). Cached KV belongs to
the weights that computed it, so the cache is keyed by the module's `WeightVersion` (`skyrl_train.types`), which
every weight change bumps (optimizer steps, `load_state_dict`, adapter switches): a prefix cached before a change is
never reused after it, whether or not the trainer went through `sleep()`. `sleep()` and `reset_prefix_cache()` also
drop the cache, to free its memory.

Device: the engine runs where the model is (the device of its parameters: CUDA or the CPU; move the model before
building the engine). Every tensor it builds lives there (see `batcher`); a decode step reads back once, the sampled
tokens with their logprobs. Random numbers are drawn from CPU generators (the engine's `seed`, or a request's own
`seed`) and moved to the device, so a seeded request draws the same numbers whatever the device. On a GPU the prefix
cache gets at most half of the device memory free when the engine starts (`prefix_cache.prefix_cache_budget`), and
`sleep()` also returns the CUDA caching allocator's free blocks (`release_free_memory`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import logging
import threading

import torch
from transformers import DynamicCache

from skyrl_train.inference_engines.base import (
    InferenceEngineInput,
    InferenceEngineInterface,
    InferenceEngineOutput,
    SamplingParams,
    prompt_token_ids,
)
from skyrl_train.inference_engines.hf.batcher import ContinuousBatcher, EngineStats, Request, model_device
from skyrl_train.inference_engines.hf.decode_weights import DecodeWeights
from skyrl_train.inference_engines.hf.prefix_cache import prefix_cache_budget
from skyrl_train.utils.memory import release_free_memory
from skyrl_train.utils.openmp import release_openmp_threads
from skyrl_train.weight_sync import (
    BroadcastWeightUpdateRequest,
    CudaIpcWeightUpdateRequest,
    LoraLoadRequest,
    WeightReceiver,
    WeightSyncInitInfo,
    WeightUpdateRequest,
    copy_into_module,
)
from skyrl_train.weight_sync.receiver import check_specs_fit

logger = logging.getLogger(__name__)

DEFAULT_PREFIX_CACHE_BYTES = 2 * 2**30
_ADAPTER_NAME = "skyrl_policy"
"""Name of the adapter loaded from `LoraLoadRequest`s."""


class HFInferenceEngine(InferenceEngineInterface):
    """Continuous-batching inference over an already-loaded causal LM (see the module docstring).

    Args:
        model: a transformers causal LM or a peft `PeftModel` wrapping one; shared, never copied. Full-attention
            decoders only (Llama, Qwen2, Mistral without a sliding window, ...). The engine runs on the device of
            its parameters.
        tokenizer: its tokenizer (chat template for `prompts`, decoding, stop strings).
        max_num_seqs: most sequences decoded together in one forward pass.
        max_prefill_tokens: most padded prompt tokens (cached ones included) in one prefill forward pass, which holds
            their KV (a longer prompt goes alone).
        seed: seed of the engine generator (a CPU one, whatever the device), used by requests without their own
            `seed`; None draws a random one.
        prefix_cache_bytes: memory for cached prefix KV (least recently used entries go first); 0 turns prefix
            caching off. On a GPU, at most half of its free memory when the engine starts.
        num_threads: torch intra-op threads of the scheduler thread (where every forward pass runs); None keeps
            torch's default. The setting is per thread: the caller's thread count is not changed.
        merge_lora: while the engine is busy, fold a peft LoRA adapter into copies of the base weights (`MergedLoRA`:
            one matmul per layer instead of four extra small ops; the module's own weights are put back when the
            batch drains). False computes the adapter branch at every step.
        dtype: decode in this dtype: while the engine is busy, the module's floating-point weights are replaced by
            copies in it (`DecodeWeights`: LoRA folded in before the single rounding; the module's own tensors are put
            back when the batch drains), so the KV cache and the logits are in it too (sampling and logprobs are
            computed in fp32 from the logits). None: the module's own dtype.
        shared_prefix_decode: when the sequences that start a batch (joining it while empty) share a prefix of at
            least `kv_buffer.MIN_SHARED_PREFIX` tokens, keep its KV once and have decode steps read it once for all
            running sequences (`prefix_attention`) instead of once per sequence, until a joining sequence shares less
            of it (see `kv_buffer`). False keeps every sequence's whole KV in its own row (for comparison; the results
            are the same up to float rounding).

    `SamplingParams.additional_kwargs` understood here: `ignore_eos` (bool: keep generating after EOS, until
    `max_generate_length` or a stop string). Other keys are meant for other backends and are ignored.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        max_num_seqs: int = 64,
        max_prefill_tokens: int = 8192,
        seed: int | None = None,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
        num_threads: int | None = None,
        merge_lora: bool = True,
        shared_prefix_decode: bool = True,
        dtype: torch.dtype | None = None,
    ):
        if max_num_seqs < 1 or max_prefill_tokens < 1:
            raise ValueError("max_num_seqs and max_prefill_tokens must be >= 1")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {num_threads}")
        self.num_threads = num_threads
        self.merge_lora = merge_lora
        self.dtype = dtype
        self._decode_weights: DecodeWeights | None = None
        config = model.config
        probe = DynamicCache(config=config)
        if any(probe.is_sliding) or any(probe.is_linear):
            raise NotImplementedError(
                f"HFInferenceEngine supports full-attention decoders only; {type(model).__name__} has sliding-window "
                "or linear-attention layers"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.max_positions: int | None = getattr(config, "max_position_embeddings", None)
        self.vocab_size: int = model.get_input_embeddings().num_embeddings
        generator = torch.Generator()
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        device = model_device(model)
        free_bytes = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
        prefix_cache_bytes = prefix_cache_budget(prefix_cache_bytes, free_bytes)
        logger.info(
            "HFInferenceEngine on %s: prefix cache budget %.2f GB%s",
            device,
            prefix_cache_bytes / 1e9,
            "" if free_bytes is None else f" ({free_bytes / 1e9:.2f} GB of device memory free)",
        )
        self._batcher = ContinuousBatcher(
            model,
            tokenizer,
            eos_token_ids=_eos_token_ids(model, tokenizer),
            pad_token_id=_pad_token_id(tokenizer),
            max_num_seqs=max_num_seqs,
            max_prefill_tokens=max_prefill_tokens,
            generator=generator,
            prefix_cache_bytes=prefix_cache_bytes,
            shared_prefix_decode=shared_prefix_decode,
        )
        self._cond = threading.Condition()
        self._inbox: list[Request] = []
        self._abort_requested = False
        self._prefix_reset_requested = False
        self._stopping = False
        self._asleep = False
        self._idle = True
        self._dead: BaseException | None = None
        self._receiver: WeightReceiver | None = None
        self._adapter_config = None
        """The peft LoraConfig of the adapter loaded by `LoraLoadRequest`s, once one was."""
        self._version_labels: dict[int, int] = {self._batcher.weight_version.value: 0}
        """Module `WeightVersion` value -> the weight version (trainer's) of those weights."""
        self._thread = threading.Thread(target=self._serve, name="HFInferenceEngine-scheduler", daemon=True)
        self._thread.start()

    @property
    def weight_version(self) -> int | None:
        """The weight version the engine generates with now: that of the last weight update it applied (0 before
        any), or None if the module's weights changed since without an update naming their version."""
        return self._version_labels.get(self._batcher.weight_version.value)

    @property
    def stats(self) -> EngineStats:
        """A snapshot of the work counters (forward passes, largest decode batch, tokens, finished requests)."""
        return dataclasses.replace(self._batcher.stats)

    async def generate(self, input_batch: InferenceEngineInput) -> InferenceEngineOutput:
        params = input_batch.get("sampling_params") or SamplingParams()
        prompts = self._prompt_token_ids(input_batch)
        loop = asyncio.get_running_loop()
        futures, requests = [], []
        for prompt_ids in prompts:
            future = loop.create_future()
            request = self._new_request(prompt_ids, params, functools.partial(_deliver, loop, future))
            future.add_done_callback(functools.partial(self._on_future_done, request))
            futures.append(future)
            requests.append(request)
        self._submit(requests)
        try:
            await asyncio.gather(*futures)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return InferenceEngineOutput(
            responses=[self._response_text(r) for r in requests],
            response_ids=[r.response_ids for r in requests],
            stop_reasons=[r.stop_reason for r in requests],
            response_logprobs=None if params.logprobs is None else [r.logprobs for r in requests],
            weight_versions=[self._version_labels.get(r.weight_version) for r in requests],
        )

    async def abort_generation(self) -> None:
        """Finish every in-flight and queued request now with stop reason "abort" and the tokens so far."""
        with self._cond:
            self._abort_requested = True
            self._cond.notify_all()

    async def wait_idle(self) -> None:
        """Wait until no request is in flight and the scheduler thread has handed the model back (training mode and
        weights as before generation, the LoRA adapter unfolded), keeping the prefix cache. A colocated trainer must
        not change the weights before this (or `sleep`) returns: results are delivered while the thread still holds
        the model."""
        await asyncio.to_thread(self._wait_idle)

    async def sleep(self) -> None:
        """Wait until no request is in flight, then refuse new ones until `wake_up` (the trainer's turn, when the
        weights may change). Drops the prefix cache (the running batch's KV is already freed when it is empty) and
        returns the freed memory to the OS (`release_free_memory`)."""
        await asyncio.to_thread(self._wait_idle_and_sleep)

    async def reset_prefix_cache(self) -> None:
        """Drop every cached prefix, freeing its memory (a weight change needs no call: the cache is keyed by the
        weight version). Requests already running keep their own KV; no request admitted after this call reuses a
        prefix cached before it."""
        with self._cond:
            self._prefix_reset_requested = True
            self._cond.notify_all()

    async def wake_up(self, tags: list[str] | None = None) -> None:
        with self._cond:
            self._asleep = False

    async def teardown(self) -> None:
        """Stop the scheduler thread; requests still queued or running fail with RuntimeError."""
        await self.destroy_weights_update_group()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        await asyncio.to_thread(self._thread.join)

    # -- weight sync ----------------------------------------------------------------------------------------------

    async def init_weight_update_communicator(self, info: WeightSyncInitInfo) -> None:
        """Join the weight-update group as rank `info.rank_offset` (returns once the whole group has joined)."""
        if self._receiver is not None:
            if not info.override_existing:
                raise RuntimeError(
                    "this engine is already in a weight-update group; destroy it first or join with override_existing"
                )
            await self.destroy_weights_update_group()
        self._receiver = await asyncio.to_thread(WeightReceiver, info)

    async def destroy_weights_update_group(self) -> None:
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None

    async def update_named_weights(self, request: WeightUpdateRequest) -> None:
        """Apply `request` (see `skyrl_train.weight_sync`) once no generation is in flight; requests submitted
        meanwhile are refused as while asleep. A broadcast request's names, shapes and dtypes are checked against the
        model before anything is received (its shapes never size an allocation), so a request that does not fit is
        refused without taking part in the broadcasts (the trainer's sync fails with this refusal, at the latest at
        the group's timeout)."""
        if isinstance(request, BroadcastWeightUpdateRequest):
            check_specs_fit(self.model, request.specs())
            if self._receiver is None:
                raise RuntimeError("no weight-update group: call init_weight_update_communicator first")
            tensors = await asyncio.to_thread(lambda: list(self._receiver.receive(request)))
        elif isinstance(request, CudaIpcWeightUpdateRequest):  # GPU only
            from skyrl_train.weight_sync.cuda_ipc import receive_cuda_ipc

            tensors = list(receive_cuda_ipc(request))
        elif isinstance(request, LoraLoadRequest) or not request.names:
            tensors = []
        else:
            raise ValueError(f"a {request.type!r} weight-update request cannot carry tensors")
        was_asleep = self._asleep
        await asyncio.to_thread(self._wait_idle_and_sleep)
        try:
            version = self._batcher.weight_version
            if isinstance(request, LoraLoadRequest):
                await asyncio.to_thread(self._load_adapter, request.lora_path)
                version.bump()
            elif tensors:
                await asyncio.to_thread(copy_into_module, self.model, tensors)
                version.bump()
            self._version_labels[version.value] = request.weight_version
        finally:
            with self._cond:
                self._asleep = was_asleep

    def _load_adapter(self, folder: str) -> None:
        """Load the peft adapter saved in `folder` into the (plain transformers) model: the first load adds LoRA
        layers with its config; later loads replace their weights and must have the same config."""
        from peft import LoraConfig, PeftModel, inject_adapter_in_model, set_peft_model_state_dict
        from safetensors.torch import load_file

        from skyrl_train.weight_sync.lora import ADAPTER_WEIGHTS_FILE, same_adapter_layout

        if isinstance(self.model, PeftModel):
            raise RuntimeError("this engine's model is a peft model; LoRA load requests need a plain base model")
        config = LoraConfig.from_pretrained(folder)
        if self._adapter_config is None:
            self._adapter_config = copy.deepcopy(config)  # peft resolves e.g. "all-linear" in the one it injects
            inject_adapter_in_model(config, self.model, adapter_name=_ADAPTER_NAME)
        elif not same_adapter_layout(config, self._adapter_config):
            raise ValueError(
                f"the adapter in {folder} has another LoRA layout (rank, alpha, target modules) than the one loaded "
                "before; start a new engine to change it"
            )
        # peft saves the keys of a PeftModel ("base_model.model." + the base model's names).
        weights = {
            k.removeprefix("base_model.model."): v for k, v in load_file(f"{folder}/{ADAPTER_WEIGHTS_FILE}").items()
        }
        result = set_peft_model_state_dict(self.model, weights, adapter_name=_ADAPTER_NAME)
        if result.unexpected_keys:
            raise ValueError(
                f"the adapter in {folder} has weights this model has no LoRA layer for: {result.unexpected_keys[:3]}"
            )

    # -- caller side ----------------------------------------------------------------------------------------------

    def _prompt_token_ids(self, input_batch: InferenceEngineInput) -> list[list[int]]:
        token_ids = prompt_token_ids(input_batch, self.tokenizer)
        # Checked here so that one bad prompt fails its own call, not the whole running batch.
        for ids in token_ids:
            if min(ids) < 0 or max(ids) >= self.vocab_size:
                raise ValueError(f"prompt token ids must be in [0, {self.vocab_size})")
            if self.max_positions is not None and len(ids) >= self.max_positions:
                raise ValueError(
                    f"prompt of {len(ids)} tokens leaves no room in the {self.max_positions}-token context"
                )
        return token_ids

    def _new_request(self, prompt_ids: list[int], params: SamplingParams, on_finish) -> Request:
        max_new_tokens = params.max_generate_length
        if self.max_positions is not None:
            max_new_tokens = min(max_new_tokens, self.max_positions - len(prompt_ids))
        generator = None
        if params.seed is not None:
            generator = torch.Generator()
            generator.manual_seed(params.seed)
        return Request(
            prompt_ids=prompt_ids,
            params=params,
            max_new_tokens=max_new_tokens,
            on_finish=on_finish,
            generator=generator,
            ignore_eos=bool(params.additional_kwargs.get("ignore_eos", False)),
        )

    def _submit(self, requests: list[Request]) -> None:
        with self._cond:
            if self._dead is not None:
                raise RuntimeError("the HFInferenceEngine scheduler thread died") from self._dead
            if self._stopping:
                raise RuntimeError("HFInferenceEngine was torn down")
            if self._asleep:
                raise RuntimeError("HFInferenceEngine is asleep (the trainer's turn); call wake_up() first")
            self._inbox.extend(requests)
            self._cond.notify_all()

    def _on_future_done(self, request: Request, future: asyncio.Future) -> None:
        if future.cancelled():
            request.cancelled = True
            self._batcher.cancel_pending = True

    def _response_text(self, request: Request) -> str:
        text = self.tokenizer.decode(request.response_ids, skip_special_tokens=True)
        if request.matched_stop is not None:
            # The token that completed the stop string may carry text after it; the response ends at the stop string.
            end = text.find(request.matched_stop)
            if end >= 0:
                text = text[: end + len(request.matched_stop)]
        return text

    def _wait_idle(self) -> None:
        with self._cond:
            self._cond.wait_for(self._is_idle)

    def _is_idle(self) -> bool:
        return (self._idle and not self._inbox) or self._stopping or self._dead is not None

    def _wait_idle_and_sleep(self) -> None:
        with self._cond:
            self._cond.wait_for(self._is_idle)
            self._asleep = True
            # The scheduler thread is parked (idle) or gone, so the cache has no other user right now.
            self._batcher.prefix_cache.clear()
            release_free_memory()  # what the scheduler thread freed stays in its malloc arena otherwise

    # -- scheduler thread -----------------------------------------------------------------------------------------

    def _serve(self) -> None:
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        batcher = self._batcher
        restore_training: bool | None = None
        try:
            while True:
                with self._cond:
                    if not (self._inbox or self._abort_requested or self._stopping or batcher.has_work()):
                        if restore_training is not None:
                            self._restore_weights()
                            self.model.train(restore_training)
                            restore_training = None
                            release_openmp_threads()  # so that the trainer's thread has the cores to itself
                        self._idle = True
                        self._cond.notify_all()
                        self._cond.wait_for(lambda: self._inbox or self._abort_requested or self._stopping)
                    if self._stopping:
                        break
                    incoming, self._inbox = self._inbox, []
                    abort, self._abort_requested = self._abort_requested, False
                    reset_prefixes, self._prefix_reset_requested = self._prefix_reset_requested, False
                    self._idle = False
                if reset_prefixes:  # before admitting anything submitted after the reset call
                    batcher.prefix_cache.clear()
                if restore_training is None:
                    restore_training = self.model.training
                    self.model.eval()
                    self._decode_weights = DecodeWeights(self.model, fold_lora=self.merge_lora, dtype=self.dtype)
                batcher.submit(incoming)
                try:
                    if abort:
                        batcher.abort_all()
                    with torch.no_grad():
                        batcher.step()
                except Exception as error:  # a failed step fails its requests, not the engine
                    batcher.fail_all(error)
            batcher.fail_all(RuntimeError("HFInferenceEngine was torn down"))
        except BaseException as error:
            with self._cond:
                self._dead = error
                batcher.submit(self._inbox)
                self._inbox = []
                self._cond.notify_all()
            batcher.fail_all(RuntimeError(f"the HFInferenceEngine scheduler thread died: {error!r}"))
            raise
        finally:
            if restore_training is not None:
                self._restore_weights()
                self.model.train(restore_training)

    def _restore_weights(self) -> None:
        if self._decode_weights is not None:
            self._decode_weights.restore()
            self._decode_weights = None


def _deliver(loop: asyncio.AbstractEventLoop, future: asyncio.Future, request: Request, error: BaseException | None):
    """Resolve `future` on its own event loop (called from the scheduler thread)."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
        loop.call_soon_threadsafe(_settle, future, error)


def _settle(future: asyncio.Future, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _eos_token_ids(model: torch.nn.Module, tokenizer) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), tokenizer):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            ids.update(eos if isinstance(eos, list | tuple) else [eos])
    return ids


def _pad_token_id(tokenizer) -> int:
    # Padding positions are masked out, so any valid id works; fall back to eos, then 0.
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return candidate
    return 0
