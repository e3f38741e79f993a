"""The `openai` SDK against the server on a real socket: models, chat, completions, streaming, errors."""

from __future__ import annotations

import asyncio

import openai
import pytest

from .conftest import MODEL_NAME

MESSAGES = [{"role": "user", "content": "Name a colour."}]
GREEDY = {"temperature": 0, "extra_body": {"ignore_eos": True}}


@pytest.fixture
def sdk(server):
    return openai.OpenAI(
        base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60  # pragma: allowlist secret
    )  # pragma: allowlist secret


def test_models_lists_the_served_model(sdk):
    assert [m.id for m in sdk.models.list().data] == [MODEL_NAME]


def test_chat_completion(sdk):
    result = sdk.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=5, **GREEDY)
    assert result.choices[0].message.role == "assistant"
    assert result.choices[0].message.content
    assert result.choices[0].finish_reason == "length"
    assert result.usage.completion_tokens == 5


def test_completion_with_token_ids_and_logprobs(sdk):
    result = sdk.completions.create(model=MODEL_NAME, prompt=[1000, 2000, 3000], max_tokens=4, logprobs=0, **GREEDY)
    choice = result.choices[0]
    assert choice.text and choice.finish_reason == "length"
    assert len(choice.logprobs.token_logprobs) == 4


def test_streamed_chat_equals_the_unstreamed_chat(sdk):
    kwargs = dict(model=MODEL_NAME, messages=MESSAGES, max_tokens=6, n=2, seed=3, temperature=1.0)
    whole = sdk.chat.completions.create(**kwargs)
    stream = sdk.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    texts, finish, usage = {0: "", 1: ""}, {}, None
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
        usage = chunk.usage or usage
    assert texts == {c.index: c.message.content for c in whole.choices}
    assert finish == {c.index: c.finish_reason for c in whole.choices}
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_streamed_completion_equals_the_unstreamed_completion(sdk):
    kwargs = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=6, seed=4, temperature=1.0)
    whole = sdk.completions.create(**kwargs)
    text = "".join(chunk.choices[0].text for chunk in sdk.completions.create(**kwargs, stream=True))
    assert text == whole.choices[0].text


def test_errors_raise_the_sdk_exceptions(sdk):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        sdk.chat.completions.create(model="nope", messages=MESSAGES, max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="presence_penalty"):
        sdk.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=2, presence_penalty=1.0)


async def test_four_concurrent_requests_all_succeed_sharing_forward_passes(server, engine):
    sdk = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)  # pragma: allowlist secret
    prompts = [f"Count to {i}:" for i in range(4)]
    results = await asyncio.gather(
        *(sdk.completions.create(model=MODEL_NAME, prompt=p, max_tokens=16, **GREEDY) for p in prompts)
    )
    assert [r.usage.completion_tokens for r in results] == [16, 16, 16, 16]
    assert engine.stats.max_batch_size >= 2
    await sdk.close()


def test_health(server):
    import httpx

    response = httpx.get(server.url + "/health")
    # The engine has taken no weight update: it generates with the weights it started with, version 0.
    assert (response.status_code, response.json()) == (200, {"status": "ok", "weight_version": 0})
