"""Bad requests get OpenAI's error shape with a status and the field at fault."""

from __future__ import annotations

import pytest

from .conftest import CONTEXT, MODEL_NAME

OK_COMPLETION = {"model": MODEL_NAME, "prompt": [1, 2, 3], "max_tokens": 2}
OK_CHAT = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def post_error(client, path: str, body: dict) -> tuple[int, dict]:
    response = await client.post(path, json=body)
    return response.status_code, response.json()["error"]


async def test_unknown_model_is_404_model_not_found(client):
    status, error = await post_error(client, "/v1/chat/completions", {**OK_CHAT, "model": "gpt-4o"})
    assert (status, error["param"], error["code"], error["type"]) == (
        404,
        "model",
        "model_not_found",
        "invalid_request_error",
    )
    assert "'gpt-4o'" in error["message"] and f"'{MODEL_NAME}'" in error["message"]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {**OK_COMPLETION, "temperature": -0.5}, "temperature"),
        ("/v1/completions", {**OK_COMPLETION, "top_p": 0}, "top_p"),
        ("/v1/completions", {**OK_COMPLETION, "max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {**OK_COMPLETION, "n": 0}, "n"),
        ("/v1/chat/completions", {**OK_CHAT, "messages": []}, "messages"),
        ("/v1/chat/completions", {**OK_CHAT, "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ("/v1/chat/completions", {**OK_CHAT, "tools": [{"type": "function"}]}, "tools.0.function"),
        ("/v1/completions", {k: v for k, v in OK_COMPLETION.items() if k != "prompt"}, "prompt"),
    ],
)
async def test_an_invalid_field_value_is_400_naming_the_field(client, path, body, param):
    status, error = await post_error(client, path, body)
    assert (status, error["param"], error["type"]) == (400, param, "invalid_request_error")


async def test_a_value_of_no_accepted_form_is_400_listing_the_forms(client):
    status, error = await post_error(client, "/v1/completions", {**OK_COMPLETION, "prompt": [[1, "a"]]})
    assert (status, error["param"]) == (400, "prompt")
    assert error["message"] == "prompt: expected one of str, list[str], list[int], list[list[int]]"


async def test_an_unknown_field_is_400_naming_it(client):
    status, error = await post_error(client, "/v1/completions", {**OK_COMPLETION, "temprature": 0.5})
    assert (status, error["param"], error["message"]) == (400, "temprature", "unknown field 'temprature'")


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {**OK_COMPLETION, "presence_penalty": 0.5}, "presence_penalty"),
        ("/v1/completions", {**OK_COMPLETION, "frequency_penalty": 0.5}, "frequency_penalty"),
        ("/v1/completions", {**OK_COMPLETION, "logit_bias": {"5": 10}}, "logit_bias"),
        ("/v1/completions", {**OK_COMPLETION, "logprobs": 3}, "logprobs"),
        ("/v1/completions", {**OK_COMPLETION, "echo": True}, "echo"),
        ("/v1/completions", {**OK_COMPLETION, "best_of": 3}, "best_of"),
        ("/v1/chat/completions", {**OK_CHAT, "top_logprobs": 2, "logprobs": True}, "top_logprobs"),
        ("/v1/chat/completions", {**OK_CHAT, "response_format": {"type": "json_object"}}, "response_format"),
        ("/v1/chat/completions", {**OK_CHAT, "max_completion_tokens": 3}, "max_completion_tokens"),
    ],
)
async def test_an_unsupported_feature_is_400_naming_its_field(client, path, body, param):
    status, error = await post_error(client, path, body)
    assert (status, error["param"]) == (400, param)


async def test_neutral_values_of_unsupported_features_and_ignored_fields_are_accepted(client):
    body = {
        **OK_CHAT,
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "logit_bias": {},
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "user": "someone",
        "response_format": {"type": "text"},
    }
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200


async def test_a_prompt_filling_the_context_is_400_on_prompt(client):
    status, error = await post_error(client, "/v1/completions", {**OK_COMPLETION, "prompt": [1] * CONTEXT})
    assert (status, error["param"]) == (400, "prompt")
    assert f"{CONTEXT} tokens long" in error["message"] and f"context of {CONTEXT} tokens" in error["message"]


async def test_a_chat_longer_than_the_context_is_400_on_messages(client):
    body = {**OK_CHAT, "messages": [{"role": "user", "content": "word " * CONTEXT}]}
    status, error = await post_error(client, "/v1/chat/completions", body)
    assert (status, error["param"]) == (400, "messages")


async def test_max_tokens_beyond_the_context_is_400_on_max_tokens(client):
    status, error = await post_error(client, "/v1/completions", {**OK_COMPLETION, "max_tokens": CONTEXT})
    assert (status, error["param"]) == (400, "max_tokens")
    assert f"at most {CONTEXT - 3} completion tokens fit" in error["message"]


@pytest.mark.parametrize(
    ("prompt", "message"),
    [([], "prompt is an empty list"), ("", "prompt is empty"), ([[1, 2], []], "prompt is empty")],
)
async def test_an_empty_prompt_is_400_on_prompt(client, prompt, message):
    status, error = await post_error(client, "/v1/completions", {**OK_COMPLETION, "prompt": prompt})
    assert (status, error["param"]) == (400, "prompt")
    assert error["message"].startswith(message)


async def test_token_ids_outside_the_vocabulary_are_400_on_prompt(client):
    status, error = await post_error(client, "/v1/completions", {**OK_COMPLETION, "prompt": [1, 49152]})
    assert (status, error["param"], error["message"]) == (
        400,
        "prompt",
        "prompt has token ids outside the vocabulary [0, 49152)",
    )


async def test_image_content_parts_are_400_on_the_message_content(client):
    content = [{"type": "image_url", "image_url": {"url": "http://example.com/cat.png"}}]
    body = {**OK_CHAT, "messages": [{"role": "user", "content": content}]}
    status, error = await post_error(client, "/v1/chat/completions", body)
    assert (status, error["param"]) == (400, "messages.0.content")
    assert "only text content parts are supported, got type 'image_url'" in error["message"]


async def test_a_body_that_is_not_json_is_400(client):
    response = await client.post("/v1/completions", content=b"{nope", headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("the request body is not valid JSON")


async def test_a_model_without_chat_template_answers_chat_with_400(engine, tiny_model):
    import httpx

    from skyrl_train.models import load_tokenizer
    from skyrl_train.serve import create_app

    tokenizer = load_tokenizer(tiny_model)
    tokenizer.chat_template = None
    app = create_app(engine, tokenizer, served_model_name=MODEL_NAME, max_model_len=CONTEXT)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        status, error = await post_error(client, "/v1/chat/completions", OK_CHAT)
    assert (status, error["param"]) == (400, "messages")
    assert "no chat template; use /v1/completions" in error["message"]


async def test_a_failing_engine_is_500_in_the_openai_shape_with_the_details_only_in_the_log(app, engine, caplog):
    import httpx

    await engine.teardown()  # the engine refuses new work from now on
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        status, error = await post_error(client, "/v1/completions", OK_COMPLETION)
    assert (status, error["type"]) == (500, "server_error")
    assert error["message"] == "generation failed (the server's log has the details)"
    assert "HFInferenceEngine was torn down" in caplog.text


async def test_a_generation_failing_mid_stream_sends_an_error_event_then_done(app, engine):
    import httpx

    await engine.teardown()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        response = await client.post("/v1/chat/completions", json={**OK_CHAT, "stream": True})
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert response.status_code == 200  # the stream had started (role chunk) before generation failed
    assert '"role": "assistant"' in events[0]
    assert '"type": "server_error"' in events[1] and "generation failed (the server's log" in events[1]
    assert "torn down" not in events[1]
    assert events[2:] == ["[DONE]"]
