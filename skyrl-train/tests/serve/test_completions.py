"""`POST /v1/completions`: token-in/token-out, text prompts, batching of prompts and choices, sampling mapping."""

from __future__ import annotations

import pytest

from skyrl_train.inference_engines import SamplingParams

from .conftest import MODEL_NAME, stop_string_at

PROMPT_IDS = [504, 3458, 282, 4649, 314]


def completion(**fields) -> dict:
    return {"model": MODEL_NAME, "max_tokens": 6, "temperature": 0, "ignore_eos": True, **fields}


async def test_token_id_prompt_returns_exactly_the_engine_tokens_and_logprobs(client, engine):
    response = await client.post(
        "/v1/completions", json=completion(prompt=PROMPT_IDS, logprobs=0, return_token_ids=True)
    )
    direct = await engine.generate(
        {
            "prompt_token_ids": [PROMPT_IDS],
            "sampling_params": SamplingParams(
                temperature=0, max_generate_length=6, additional_kwargs={"ignore_eos": True}
            ),
        }
    )
    assert response.status_code == 200
    choice = response.json()["choices"][0]
    assert choice["prompt_token_ids"] == PROMPT_IDS
    assert choice["token_ids"] == direct["response_ids"][0]
    assert choice["text"] == direct["responses"][0]
    # The second request's prompt KV comes from the prefix cache (the engine's own earlier computation), so its
    # logprobs agree to float rounding, not bit for bit.
    assert choice["logprobs"]["token_logprobs"] == pytest.approx(direct["response_logprobs"][0], abs=1e-5)
    assert choice["finish_reason"] == "length"


async def test_logprob_tokens_are_the_decoded_sampled_tokens_with_their_offsets(client, tiny_tokenizer):
    body = (
        await client.post("/v1/completions", json=completion(prompt=PROMPT_IDS, logprobs=0, return_token_ids=True))
    ).json()
    choice = body["choices"][0]
    tokens = [tiny_tokenizer.decode([t]) for t in choice["token_ids"]]
    assert choice["logprobs"]["tokens"] == tokens
    assert choice["logprobs"]["text_offset"] == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]


async def test_text_prompt_is_tokenized_like_the_tokenizer_does(client, tiny_tokenizer):
    text = "The capital of France is"
    body = (await client.post("/v1/completions", json=completion(prompt=text, return_token_ids=True))).json()
    assert body["choices"][0]["prompt_token_ids"] == tiny_tokenizer(text)["input_ids"]
    assert body["usage"]["prompt_tokens"] == len(tiny_tokenizer(text)["input_ids"])


async def test_several_prompts_with_n_give_prompt_major_choice_indices_and_summed_usage(client):
    prompts = [PROMPT_IDS, PROMPT_IDS[:2]]
    body = (await client.post("/v1/completions", json=completion(prompt=prompts, n=2, return_token_ids=True))).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert [c["prompt_token_ids"] for c in body["choices"]] == [PROMPT_IDS, PROMPT_IDS, PROMPT_IDS[:2], PROMPT_IDS[:2]]
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 24, "total_tokens": 31}


async def test_no_logprobs_unless_asked(client):
    body = (await client.post("/v1/completions", json=completion(prompt=PROMPT_IDS))).json()
    assert body["choices"][0]["logprobs"] is None
    assert "token_ids" not in body["choices"][0]


async def test_seeded_sampling_is_reproducible_and_choices_use_different_seeds(client):
    request = completion(prompt=PROMPT_IDS, temperature=1.0, seed=11, n=2, max_tokens=8, return_token_ids=True)
    first = (await client.post("/v1/completions", json=request)).json()["choices"]
    second = (await client.post("/v1/completions", json=request)).json()["choices"]
    assert [c["token_ids"] for c in first] == [c["token_ids"] for c in second]
    assert first[0]["token_ids"] != first[1]["token_ids"]


async def test_stop_string_ends_the_choice_and_is_removed_from_its_text(client, tiny_tokenizer):
    request = completion(prompt=PROMPT_IDS, max_tokens=10, temperature=1.0, seed=7, return_token_ids=True)
    ids = (await client.post("/v1/completions", json=request)).json()["choices"][0]["token_ids"]
    k, stop = stop_string_at(tiny_tokenizer, ids)

    choice = (await client.post("/v1/completions", json={**request, "stop": stop})).json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["token_ids"] == ids[: k + 1]
    text = tiny_tokenizer.decode(ids[: k + 1])
    assert choice["text"] == text[: text.rindex(stop)]


async def test_default_max_tokens_is_16(client):
    request = {"model": MODEL_NAME, "prompt": PROMPT_IDS, "ignore_eos": True}
    body = (await client.post("/v1/completions", json=request)).json()
    assert body["usage"]["completion_tokens"] == 16
