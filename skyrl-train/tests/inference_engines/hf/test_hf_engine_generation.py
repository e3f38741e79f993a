"""What HFInferenceEngine generates: tokens, logprobs, stop reasons, sampling, batching (tiny random Llama); greedy
decoding, seeded sampling and prefix caching on every available device."""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

from skyrl_gym.common.stop_reasons import StopReason
from skyrl_train.inference_engines import HFInferenceEngine, SamplingParams
from skyrl_train.inference_engines.hf.prefix_cache import BLOCK_TOKENS
from skyrl_train.testing import on_every_device

from .conftest import MODEL_KINDS, build_model, model_input

PROMPTS = ["Hello", "The capital of France is", "1 2 3 4 5 6 7 8 9 10 11 12", "Once upon a time, in a land far away,"]


def token_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text).input_ids


def greedy(max_tokens: int, **extra) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_generate_length=max_tokens, additional_kwargs=extra)


async def generate_one(engine, prompt_ids: list[int], params: SamplingParams) -> dict:
    output = await engine.generate({"prompt_token_ids": [prompt_ids], "sampling_params": params})
    return {key: value[0] for key, value in output.items()}


async def after_decode_steps(engine, steps: int) -> None:
    while engine.stats.decode_forward_passes < steps:
        await asyncio.sleep(0.0005)


def full_forward_logits(model, prompt_ids: list[int], response_ids: list[int]) -> torch.Tensor:
    """One plain forward over prompt + response: the logits [len(response), V] (on the CPU) that predict the
    response tokens."""
    with torch.no_grad():
        logits = model(model_input(model, prompt_ids + response_ids)).logits[0, len(prompt_ids) - 1 : -1]
    return logits.float().cpu()


def full_forward_logprobs(model, prompt_ids: list[int], response_ids: list[int], temperature: float) -> torch.Tensor:
    """What the trainer computes: one forward over prompt + response, log_softmax(logits / T) at the response."""
    logprobs = torch.log_softmax(full_forward_logits(model, prompt_ids, response_ids) / temperature, dim=-1)
    return logprobs.gather(-1, torch.tensor(response_ids)[:, None]).squeeze(-1)


def generate_alone(model, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """transformers' own greedy decoding of `prompt_ids` alone, `max_tokens` new tokens."""
    output = model.generate(
        input_ids=model_input(model, prompt_ids), max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False
    )
    return output[0, len(prompt_ids) :].tolist()


async def test_greedy_output_equals_model_generate_of_each_prompt_alone(engine, model, tiny_tokenizer):
    prompts = [token_ids(tiny_tokenizer, text) for text in PROMPTS]
    outputs = await asyncio.gather(*(generate_one(engine, p, greedy(12, ignore_eos=True)) for p in prompts))
    for prompt, output in zip(prompts, outputs, strict=True):
        assert output["response_ids"] == generate_alone(model, prompt, 12)
    assert engine.stats.max_batch_size >= 2


@on_every_device
async def test_greedy_tokens_on_every_device_are_the_argmax_of_a_plain_cpu_forward_pass(
    device, engine_on, model, tiny_tokenizer
):
    engine = engine_on(device)
    prompts = [token_ids(tiny_tokenizer, text) for text in PROMPTS]
    outputs = await asyncio.gather(*(generate_one(engine, p, greedy(12, ignore_eos=True)) for p in prompts))
    for prompt, output in zip(prompts, outputs, strict=True):
        argmax = full_forward_logits(model, prompt, output["response_ids"]).argmax(dim=-1)
        assert output["response_ids"] == argmax.tolist()
    assert engine.stats.max_batch_size >= 2


async def test_logprobs_match_a_full_forward_pass_for_requests_joining_a_running_batch(engine, model, tiny_tokenizer):
    # (prompt, new tokens, decode steps of the running batch before joining): later prompts are longer than the
    # batch's padded width when they join, and shorter requests leave while others keep going.
    plan = [(PROMPTS[0], 40, 0), (PROMPTS[1], 8, 3), (PROMPTS[3] * 3, 20, 6), (PROMPTS[2], 12, 10)]
    params = [
        SamplingParams(temperature=0.7, max_generate_length=n, additional_kwargs={"ignore_eos": True})
        for _, n, _ in plan
    ]

    async def loop(text: str, sampling: SamplingParams, join_at: int) -> tuple[list[int], dict]:
        await after_decode_steps(engine, join_at)
        prompt = token_ids(tiny_tokenizer, text)
        return prompt, await generate_one(engine, prompt, sampling)

    results = await asyncio.gather(*(loop(text, p, join) for (text, _, join), p in zip(plan, params, strict=True)))
    diffs = []
    for prompt, output in results:
        expected = full_forward_logprobs(model, prompt, output["response_ids"], temperature=0.7)
        diffs.append((expected - torch.tensor(output["response_logprobs"])).abs())
    assert torch.cat(diffs).mean().item() < 1e-4
    assert torch.cat(diffs).max().item() < 1e-3
    assert engine.stats.max_batch_size >= 3


async def test_logprobs_match_when_requests_queue_for_a_full_batch_and_outgrow_the_cache(model, tiny_tokenizer):
    # 12 requests through 4 rows, up to 200 tokens each: rows are reused, and the KV buffer runs out of columns,
    # grows, and drops the padding columns nobody needs any more.
    rng = random.Random(0)
    plan = [([rng.randrange(3, 49000) for _ in range(rng.randint(1, 60))], rng.randint(5, 200)) for _ in range(12)]
    engine = HFInferenceEngine(model, tiny_tokenizer, max_num_seqs=4, seed=0)
    try:

        async def loop(index: int, prompt: list[int], max_tokens: int):
            await after_decode_steps(engine, 10 * index)
            params = SamplingParams(
                temperature=0.9, max_generate_length=max_tokens, additional_kwargs={"ignore_eos": True}
            )
            return await generate_one(engine, prompt, params)

        outputs = await asyncio.gather(*(loop(i, prompt, n) for i, (prompt, n) in enumerate(plan)))
    finally:
        await engine.teardown()
    diffs = []
    for (prompt, max_tokens), output in zip(plan, outputs, strict=True):
        assert len(output["response_ids"]) == max_tokens
        expected = full_forward_logprobs(model, prompt, output["response_ids"], temperature=0.9)
        diffs.append((expected - torch.tensor(output["response_logprobs"])).abs())
    assert torch.cat(diffs).mean().item() < 1e-4
    assert engine.stats.max_batch_size == 4


@on_every_device
async def test_seeded_sampling_is_reproducible_whatever_else_is_in_the_batch(device, engine_on, tiny_tokenizer):
    engine = engine_on(device)
    seeded = SamplingParams(temperature=1.0, max_generate_length=16, seed=1234, additional_kwargs={"ignore_eos": True})
    prompt = token_ids(tiny_tokenizer, PROMPTS[1])
    alone = await generate_one(engine, prompt, seeded)
    others = [token_ids(tiny_tokenizer, text) for text in (PROMPTS[0], PROMPTS[2], PROMPTS[3])]
    unseeded = SamplingParams(temperature=1.0, max_generate_length=16, additional_kwargs={"ignore_eos": True})
    crowded, *_ = await asyncio.gather(
        generate_one(engine, prompt, seeded), *(generate_one(engine, p, unseeded) for p in others)
    )
    assert crowded["response_ids"] == alone["response_ids"]


@on_every_device
async def test_a_seeded_request_samples_the_tokens_of_a_cpu_engine_whatever_the_engine_seed(
    device, engine_on, tiny_tokenizer
):
    seeded = SamplingParams(temperature=1.0, max_generate_length=16, seed=1234, additional_kwargs={"ignore_eos": True})
    prompt = token_ids(tiny_tokenizer, PROMPTS[3])
    on_device = await generate_one(engine_on(device, seed=1), prompt, seeded)
    on_cpu = await generate_one(engine_on("cpu", seed=2), prompt, seeded)
    assert on_device["response_ids"] == on_cpu["response_ids"]
    torch.testing.assert_close(
        torch.tensor(on_device["response_logprobs"]), torch.tensor(on_cpu["response_logprobs"]), atol=1e-4, rtol=0
    )


async def test_top_k_one_equals_greedy(engine, tiny_tokenizer):
    prompt = token_ids(tiny_tokenizer, PROMPTS[3])
    top1 = SamplingParams(temperature=1.0, top_k=1, max_generate_length=10, additional_kwargs={"ignore_eos": True})
    sampled, greedy_output = await asyncio.gather(
        generate_one(engine, prompt, top1), generate_one(engine, prompt, greedy(10, ignore_eos=True))
    )
    assert sampled["response_ids"] == greedy_output["response_ids"]


async def test_stop_string_ends_generation_and_is_included_in_the_text(engine, tiny_tokenizer):
    prompt = token_ids(tiny_tokenizer, PROMPTS[1])
    sampling = SamplingParams(temperature=1.0, max_generate_length=12, seed=7, additional_kwargs={"ignore_eos": True})
    free = await generate_one(engine, prompt, sampling)
    # Stop at the text of the 6th generated token, which the first five do not contain.
    stop = tiny_tokenizer.decode(free["response_ids"][5:6]).strip()
    assert stop and stop not in tiny_tokenizer.decode(free["response_ids"][:5])

    stopped = await generate_one(engine, prompt, sampling.replace(stop=[stop]))
    assert stopped["stop_reasons"] == StopReason.STOP
    assert stopped["response_ids"] == free["response_ids"][:6]
    assert stopped["responses"].endswith(stop)
    assert len(stopped["response_logprobs"]) == 6


async def test_max_generate_length_ends_with_reason_length(engine, tiny_tokenizer):
    output = await generate_one(engine, token_ids(tiny_tokenizer, PROMPTS[0]), greedy(3, ignore_eos=True))
    assert (len(output["response_ids"]), output["stop_reasons"]) == (3, StopReason.LENGTH)


@pytest.fixture
def eos_always_wins(model):
    """Make EOS (id 2) the argmax of every position by adding 1e4 to its logit."""

    def hook(module, args, output):
        output[..., 2] += 1e4
        return output

    handle = model.get_output_embeddings().register_forward_hook(hook)
    yield
    handle.remove()


async def test_eos_ends_generation_with_reason_stop_and_is_kept_in_the_ids(engine, tiny_tokenizer, eos_always_wins):
    output = await generate_one(engine, token_ids(tiny_tokenizer, PROMPTS[0]), greedy(8))
    assert output["response_ids"] == [2]
    assert output["stop_reasons"] == StopReason.STOP
    assert output["responses"] == ""


async def test_ignore_eos_generates_through_eos(engine, tiny_tokenizer, eos_always_wins):
    output = await generate_one(engine, token_ids(tiny_tokenizer, PROMPTS[0]), greedy(4, ignore_eos=True))
    assert output["response_ids"] == [2, 2, 2, 2]
    assert output["stop_reasons"] == StopReason.LENGTH


async def test_multi_prompt_call_returns_one_output_per_prompt_in_input_order(engine, tiny_tokenizer):
    prompts = [token_ids(tiny_tokenizer, text) for text in PROMPTS]
    single = [await generate_one(engine, p, greedy(5, ignore_eos=True)) for p in prompts]
    output = await engine.generate({"prompt_token_ids": prompts, "sampling_params": greedy(5, ignore_eos=True)})
    assert output["response_ids"] == [s["response_ids"] for s in single]
    assert output["stop_reasons"] == [StopReason.LENGTH] * 4
    assert len(output["response_logprobs"]) == 4 and all(len(lp) == 5 for lp in output["response_logprobs"])


async def test_conversations_are_chat_templated_with_a_generation_prompt(engine, tiny_tokenizer):
    conversation = [{"role": "user", "content": "What is 2 + 2?"}]
    templated = tiny_tokenizer.apply_chat_template(
        conversation, add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    from_ids = await generate_one(engine, templated, greedy(6, ignore_eos=True))
    output = await engine.generate({"prompts": [conversation], "sampling_params": greedy(6, ignore_eos=True)})
    assert output["response_ids"] == [from_ids["response_ids"]]


async def test_concurrent_requests_share_forward_passes(engine, tiny_tokenizer):
    prompts = [token_ids(tiny_tokenizer, f"{text} {i}") for i in range(2) for text in PROMPTS]
    await asyncio.gather(*(generate_one(engine, p, greedy(10, ignore_eos=True)) for p in prompts))
    # One at a time: 8 x (1 prefill + 9 decode steps) = 80 forward passes.
    assert engine.stats.forward_passes <= 20
    assert engine.stats.max_batch_size == 8
    assert engine.stats.generated_tokens == 80


# -- prefix caching -------------------------------------------------------------------------------------------------

SYSTEM = "You are a careful assistant. Use the tools, then answer in one short line. " * 3


def assert_logprobs_match_full_forward(model, prompt: list[int], output: dict, temperature: float) -> None:
    expected = full_forward_logprobs(model, prompt, output["response_ids"], temperature)
    assert (expected - torch.tensor(output["response_logprobs"])).abs().max().item() < 1e-3


async def test_the_next_turn_reuses_the_kv_of_the_previous_turn(any_engine, any_model, tiny_tokenizer):
    engine, model = any_engine, any_model
    sampling = SamplingParams(temperature=0.7, max_generate_length=10, additional_kwargs={"ignore_eos": True})
    turn1 = token_ids(tiny_tokenizer, SYSTEM + "What was the close of MSFT?")
    first = await generate_one(engine, turn1, sampling)
    turn2 = turn1 + first["response_ids"] + token_ids(tiny_tokenizer, " Tool result: 317.12. Now answer.")
    cached_before = engine.stats.cached_prompt_tokens
    second = await generate_one(engine, turn2, sampling)
    # Everything but the last sampled token of turn 1 (it was never fed, so it has no KV yet) comes from the cache.
    assert engine.stats.cached_prompt_tokens - cached_before == len(turn1) + len(first["response_ids"]) - 1
    assert_logprobs_match_full_forward(model, turn2, second, temperature=0.7)


async def test_a_group_prefills_its_shared_prefix_once_and_generates_what_each_prompt_alone_would(
    any_engine, any_model, tiny_tokenizer
):
    engine, model = any_engine, any_model
    # GRPO-shaped: two questions, two samples each, behind one system prompt; tails of equal length.
    questions = [token_ids(tiny_tokenizer, SYSTEM + f"Question number {i}?") for i in (1, 2)]
    assert len(questions[0]) == len(questions[1])
    prompts = [questions[0], questions[0], questions[1], questions[1]]
    shared = next(i for i, (a, b) in enumerate(zip(*questions, strict=True)) if a != b)
    output = await engine.generate({"prompt_token_ids": prompts, "sampling_params": greedy(8, ignore_eos=True)})
    assert engine.stats.prefill_forward_passes == 2  # the shared prefix, then the two distinct tails
    # Each distinct prompt reuses the cached shared prefix; each duplicate takes its twin's whole KV.
    assert engine.stats.cached_prompt_tokens == 2 * shared + 2 * len(questions[0])
    assert engine.stats.prompt_tokens == 4 * len(questions[0])
    assert engine.stats.prefilled_tokens == shared + 2 * (len(questions[0]) - shared)
    for prompt, response, logprobs in zip(prompts, output["response_ids"], output["response_logprobs"], strict=True):
        assert response == generate_alone(model, prompt, 8)
        assert_logprobs_match_full_forward(
            model, prompt, {"response_ids": response, "response_logprobs": logprobs}, temperature=1.0
        )


async def test_identical_prompts_are_prefilled_once_and_each_samples_its_own_tokens(any_engine, tiny_tokenizer):
    engine = any_engine
    prompt = token_ids(tiny_tokenizer, PROMPTS[3])
    sampling = SamplingParams(temperature=1.0, max_generate_length=12, additional_kwargs={"ignore_eos": True})
    output = await engine.generate({"prompt_token_ids": [prompt] * 4, "sampling_params": sampling})
    assert engine.stats.prefill_forward_passes == 1
    assert engine.stats.prefilled_tokens == len(prompt)
    assert engine.stats.cached_prompt_tokens == 3 * len(prompt)
    assert len({tuple(ids) for ids in output["response_ids"]}) > 1  # the samples still differ


async def test_a_prefill_group_mixing_a_cache_hit_and_a_miss_generates_what_each_prompt_alone_would(
    any_engine, any_model, tiny_tokenizer
):
    engine, model = any_engine, any_model
    sampling = SamplingParams(temperature=0.7, max_generate_length=6, additional_kwargs={"ignore_eos": True})
    long_prompt = token_ids(tiny_tokenizer, SYSTEM * 2)
    first = await generate_one(engine, long_prompt, sampling)
    continued = long_prompt + first["response_ids"] + token_ids(tiny_tokenizer, " and then?")
    unrelated = token_ids(tiny_tokenizer, PROMPTS[3])
    prompts = [continued, unrelated, token_ids(tiny_tokenizer, PROMPTS[1])]
    output = await engine.generate({"prompt_token_ids": prompts, "sampling_params": sampling})
    assert engine.stats.cached_prompt_tokens > 0
    for prompt, response_ids, logprobs in zip(
        prompts, output["response_ids"], output["response_logprobs"], strict=True
    ):
        assert_logprobs_match_full_forward(
            model, prompt, {"response_ids": response_ids, "response_logprobs": logprobs}, temperature=0.7
        )


async def test_on_the_cpu_short_uncached_tails_are_prefilled_apart_from_a_long_one(engine, model, tiny_tokenizer):
    # Turns of agent conversations behind one cached system prompt: one after a long tool result, two first turns.
    system = token_ids(tiny_tokenizer, SYSTEM * 2)
    await generate_one(engine, system, greedy(1))
    long_tail = system + token_ids(tiny_tokenizer, " Tool result: " + " ".join(str(100 + i) for i in range(60)))
    short_tails = [system + token_ids(tiny_tokenizer, f" Question {i}?") for i in (1, 2)]
    prompts = [short_tails[0], long_tail, short_tails[1]]
    before = engine.stats
    output = await engine.generate({"prompt_token_ids": prompts, "sampling_params": greedy(6, ignore_eos=True)})
    assert engine.stats.prefill_forward_passes - before.prefill_forward_passes == 2  # the long tail, then the short
    # No row feeds cached tokens again to line up with the long tail.
    assert engine.stats.prefilled_tokens - before.prefilled_tokens == sum(
        len(prompt) - len(system) for prompt in prompts
    )
    for prompt, response, logprobs in zip(prompts, output["response_ids"], output["response_logprobs"], strict=True):
        assert response == generate_alone(model, prompt, 6)
        assert_logprobs_match_full_forward(
            model, prompt, {"response_ids": response, "response_logprobs": logprobs}, temperature=1.0
        )


async def test_sleep_and_reset_prefix_cache_drop_cached_prefixes(any_engine, tiny_tokenizer):
    engine = any_engine
    prompt = token_ids(tiny_tokenizer, SYSTEM)
    first = await generate_one(engine, prompt, greedy(4, ignore_eos=True))
    continued = prompt + first["response_ids"] + token_ids(tiny_tokenizer, " more")

    async def cached_tokens_of(call) -> int:
        before = engine.stats.cached_prompt_tokens
        await call
        return engine.stats.cached_prompt_tokens - before

    assert await cached_tokens_of(generate_one(engine, continued, greedy(2))) > 0
    await engine.reset_prefix_cache()
    assert await cached_tokens_of(generate_one(engine, continued, greedy(2))) == 0
    await engine.sleep()
    await engine.wake_up()
    assert await cached_tokens_of(generate_one(engine, continued, greedy(2))) == 0


@pytest.mark.parametrize("kind", MODEL_KINDS)
async def test_after_a_weight_update_between_sleep_and_wake_up_generation_uses_only_the_new_weights(
    tiny_model, tiny_tokenizer, kind
):
    model = build_model(tiny_model, kind)
    engine = HFInferenceEngine(model, tiny_tokenizer, max_num_seqs=4, seed=0)
    try:
        prompt = token_ids(tiny_tokenizer, SYSTEM)
        first = await generate_one(engine, prompt, greedy(6, ignore_eos=True))
        await engine.sleep()
        with torch.no_grad():  # an "optimizer step" that changes every layer's keys (and their adapters)
            for name, param in model.named_parameters():
                if "k_proj" in name:
                    param.mul_(-3.0)
        await engine.wake_up()
        continued = prompt + first["response_ids"]
        output = await generate_one(engine, continued, greedy(6, ignore_eos=True))
    finally:
        await engine.teardown()
    assert output["response_ids"] == generate_alone(model, continued, 6)
    assert engine.stats.cached_prompt_tokens == 0


async def test_conversations_behind_a_long_system_prompt_share_its_cached_blocks_and_resume_exactly(
    any_engine, any_model, tiny_tokenizer
):
    engine, model = any_engine, any_model
    sampling = SamplingParams(temperature=0.7, max_generate_length=8, additional_kwargs={"ignore_eos": True})
    system = token_ids(tiny_tokenizer, SYSTEM * 4)
    assert len(system) > 2 * BLOCK_TOKENS
    turn1 = [system + token_ids(tiny_tokenizer, f" Question {i}: what was the close of MSFT?") for i in (1, 2)]
    first = await engine.generate({"prompt_token_ids": turn1, "sampling_params": sampling})
    turn2 = [
        prompt + response + token_ids(tiny_tokenizer, " Tool result: 317.12. Now answer.")
        for prompt, response in zip(turn1, first["response_ids"], strict=True)
    ]
    cached_before = engine.stats.cached_prompt_tokens
    second = await engine.generate({"prompt_token_ids": turn2, "sampling_params": sampling})
    # everything but each turn's last sampled token (never fed) comes from the cache, across block boundaries
    assert engine.stats.cached_prompt_tokens - cached_before == sum(
        len(prompt) + len(response) - 1 for prompt, response in zip(turn1, first["response_ids"], strict=True)
    )
    for prompt, response_ids, logprobs in zip(turn2, second["response_ids"], second["response_logprobs"], strict=True):
        assert_logprobs_match_full_forward(
            model, prompt, {"response_ids": response_ids, "response_logprobs": logprobs}, temperature=0.7
        )
    # A finished sequence is cached just after its caller is answered: one more request orders after those inserts.
    await generate_one(engine, token_ids(tiny_tokenizer, PROMPTS[0]), greedy(1))
    cache = engine._batcher.prefix_cache
    conversations = [entry for entry in cache._entries.values() if entry.tokens[: len(system)].tolist() == system]
    assert [len(entry.tokens) for entry in conversations] == [
        len(p) + len(r) - 1 for p, r in zip(turn2, second["response_ids"], strict=True)
    ]
    one, two = conversations
    shared_blocks = len(system) // BLOCK_TOKENS
    assert all(one.blocks[i] is two.blocks[i] for i in range(shared_blocks))  # the system prompt's KV is held once
    assert cache.nbytes < sum(entry.nbytes for entry in cache._entries.values())


async def test_rows_behind_a_shared_prefix_read_it_once_and_match_a_full_forward_pass(
    any_engine, any_model, tiny_tokenizer
):
    # Two conversations behind one system prompt start the batch (their prefix is kept once); a third joins sharing
    # only part of it (the prefix narrows), a fourth shares nothing (the sharing ends), all while others decode.
    engine, model = any_engine, any_model
    system = token_ids(tiny_tokenizer, SYSTEM * 4)
    plan = [
        (system + token_ids(tiny_tokenizer, " Question 1: the close of MSFT?"), 30, 0),
        (system + token_ids(tiny_tokenizer, " Question 2: the volume of AAPL?"), 24, 0),
        (system[:80] + token_ids(tiny_tokenizer, " Another system prompt. Question 3?"), 16, 4),
        (token_ids(tiny_tokenizer, PROMPTS[3]), 8, 10),
    ]
    sampling = [
        SamplingParams(temperature=0.7, max_generate_length=n, additional_kwargs={"ignore_eos": True})
        for _, n, _ in plan
    ]

    async def loop(prompt: list[int], params: SamplingParams, join_at: int) -> dict:
        await after_decode_steps(engine, join_at)
        return await generate_one(engine, prompt, params)

    outputs = await asyncio.gather(*(loop(p, s, join) for (p, _, join), s in zip(plan, sampling, strict=True)))
    for (prompt, max_tokens, _), output in zip(plan, outputs, strict=True):
        assert len(output["response_ids"]) == max_tokens
        assert_logprobs_match_full_forward(model, prompt, output, temperature=0.7)
    assert 0 < engine.stats.shared_prefix_decode_passes < engine.stats.decode_forward_passes
