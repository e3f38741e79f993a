"""HFInferenceEngine around the trainer: errors, teardown, sleep/wake, abort, cancellation, eval mode, LoRA, memory."""

from __future__ import annotations

import asyncio
import os

import pytest
import torch

from skyrl_gym.common.stop_reasons import StopReason
from skyrl_train.inference_engines import HFInferenceEngine, SamplingParams
from skyrl_train.models import load_causal_lm
from skyrl_train.testing import on_every_device

PROMPT = [1, 4093, 198, 19556, 2, 198]
LONG = SamplingParams(temperature=0.0, max_generate_length=2000, additional_kwargs={"ignore_eos": True})


def greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_generate_length=max_tokens, additional_kwargs={"ignore_eos": True})


async def test_an_error_in_the_scheduler_reaches_the_caller_and_the_engine_keeps_serving(engine, model):
    def explode(module, args):
        raise RuntimeError("boom in forward")

    handle = model.register_forward_pre_hook(explode)
    try:
        with pytest.raises(RuntimeError, match="boom in forward"):
            await asyncio.wait_for(engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": greedy(4)}), 30)
    finally:
        handle.remove()
    output = await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": greedy(4)})
    assert len(output["response_ids"][0]) == 4


async def test_teardown_stops_the_scheduler_thread_and_refuses_new_requests(model, tiny_tokenizer):
    engine = HFInferenceEngine(model, tiny_tokenizer)
    await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": greedy(2)})
    await engine.teardown()
    assert not engine._thread.is_alive()
    with pytest.raises(RuntimeError, match="torn down"):
        await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": greedy(2)})


async def test_teardown_fails_requests_still_running(model, tiny_tokenizer):
    engine = HFInferenceEngine(model, tiny_tokenizer)
    running = asyncio.ensure_future(engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": LONG}))
    while engine.stats.decode_forward_passes < 2:
        await asyncio.sleep(0.001)
    await engine.teardown()
    with pytest.raises(RuntimeError, match="torn down"):
        await asyncio.wait_for(running, 10)


async def test_abort_returns_the_tokens_so_far_with_reason_abort(engine):
    running = asyncio.ensure_future(engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": LONG}))
    while engine.stats.decode_forward_passes < 3:
        await asyncio.sleep(0.001)
    await engine.abort_generation()
    output = await asyncio.wait_for(running, 10)
    assert output["stop_reasons"] == [StopReason.ABORT]
    assert 3 <= len(output["response_ids"][0]) < 2000
    assert len(output["response_logprobs"][0]) == len(output["response_ids"][0])


async def test_a_cancelled_request_is_dropped_from_the_batch(engine):
    running = asyncio.ensure_future(engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": LONG}))
    while engine.stats.decode_forward_passes < 2:
        await asyncio.sleep(0.001)
    running.cancel()
    await asyncio.wait_for(engine.sleep(), 10)  # returns once nothing is in flight
    assert engine.stats.decode_forward_passes < 1000


async def test_sleep_refuses_requests_until_wake_up(engine):
    await engine.sleep()
    with pytest.raises(RuntimeError, match="asleep"):
        await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": greedy(2)})
    await engine.wake_up()
    output = await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": greedy(2)})
    assert len(output["response_ids"][0]) == 2


async def test_generation_runs_in_eval_mode_without_grad_and_restores_train_mode(engine, model):
    seen = []
    handle = model.register_forward_pre_hook(
        lambda module, args: seen.append((module.training, torch.is_grad_enabled()))
    )
    model.train()
    try:
        await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": greedy(3)})
        await engine.sleep()
        assert seen == [(False, False)] * 3
        assert model.training
    finally:
        handle.remove()
        model.eval()


async def test_lora_adapter_is_active_during_generation(tiny_model, tiny_tokenizer):
    from peft import LoraConfig, get_peft_model

    base_model = load_causal_lm(tiny_model)
    prompt = torch.tensor([PROMPT])
    base = base_model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)[0, len(PROMPT) :].tolist()
    torch.manual_seed(0)
    lora = LoraConfig(r=8, lora_alpha=32, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False)
    peft_model = get_peft_model(base_model, lora).eval()
    adapted = peft_model.generate(input_ids=prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    adapted = adapted[0, len(PROMPT) :].tolist()
    assert adapted != base

    engine = HFInferenceEngine(peft_model, tiny_tokenizer)
    try:
        output = await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": greedy(8)})
    finally:
        await engine.teardown()
    assert output["response_ids"][0] == adapted


async def test_an_out_of_vocabulary_prompt_fails_its_own_call_before_reaching_the_batch(engine):
    with pytest.raises(ValueError, match=r"\[0, 49152\)"):
        await engine.generate({"prompt_token_ids": [[1, 49152]], "sampling_params": greedy(2)})
    assert engine.stats.forward_passes == 0


async def test_forward_passes_run_with_num_threads_and_the_caller_keeps_its_own(model, tiny_tokenizer):
    caller_threads = torch.get_num_threads()
    engine = HFInferenceEngine(model, tiny_tokenizer, num_threads=1)
    seen = []
    handle = model.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))
    try:
        await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": greedy(2)})
    finally:
        handle.remove()
        await engine.teardown()
    assert seen == [1, 1]
    assert torch.get_num_threads() == caller_threads


async def test_the_scheduler_thread_hands_back_its_openmp_workers_when_the_batch_runs_dry(model, tiny_tokenizer):
    """A trainer thread computing while the engine idles then has the cores to itself (`release_openmp_threads`)."""

    def os_threads() -> int:
        return len(os.listdir("/proc/self/task"))

    engine = HFInferenceEngine(model, tiny_tokenizer, num_threads=2)
    during = []

    def count_then_run_a_parallel_kernel(module, args):
        during.append(os_threads())
        torch.ones(1 << 22).add_(1)  # the tiny model's own kernels are too small to run in parallel

    handle = model.register_forward_pre_hook(count_then_run_a_parallel_kernel)
    try:
        await engine.wait_idle()  # starts the event loop's executor thread that waiting uses
        idle = os_threads()
        await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": greedy(3)})
        await engine.wait_idle()
        after = os_threads()
    finally:
        handle.remove()
        await engine.teardown()
    assert during[1:] == [idle + 1, idle + 1]  # the scheduler thread's OpenMP worker, from its first kernel on
    assert after == idle


@pytest.mark.parametrize(("cuda_initialised", "expected_calls"), [(True, 1), (False, 0)])
async def test_sleep_returns_the_cuda_caching_allocators_free_blocks_once_cuda_is_initialised(
    engine, monkeypatch, cuda_initialised, expected_calls
):
    await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": greedy(2)})
    calls = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: cuda_initialised)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    await engine.sleep()
    assert len(calls) == expected_calls


@on_every_device
async def test_the_prefix_cache_budget_is_the_requested_bytes_capped_at_half_the_free_gpu_memory(engine_on, device):
    requested = 10**15  # more than any GPU has
    engine = engine_on(device, prefix_cache_bytes=requested)
    budget = engine._batcher.prefix_cache.max_bytes
    if device == "cpu":
        assert budget == requested
    else:
        assert 0 < budget <= torch.cuda.mem_get_info()[1] // 2
