"""`AccessGuard` in front of the app: Host and Origin checks, API key and control token, JSON-only bodies and the body
limit; LoRA folders only under the LoRA root; the trainer's endpoint with an API key."""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest

from skyrl_train.serve import AccessPolicy, PolicyEndpoint, ServeLimits, create_app
from skyrl_train.serve.access import host_name

from .conftest import CONTEXT, MODEL_NAME

API_KEY = "sk-serve-test"  # pragma: allowlist secret
CONTROL_TOKEN = "ctl-serve-test"  # pragma: allowlist secret
COMPLETION = {"model": MODEL_NAME, "prompt": [1, 2, 3], "max_tokens": 2}
API = {"Authorization": f"Bearer {API_KEY}"}
CONTROL = {"Authorization": f"Bearer {CONTROL_TOKEN}"}


def guarded_app(engine, tokenizer, tmp_path, **limits):
    access = AccessPolicy.for_bind_host(
        "10.1.2.3",
        api_key=API_KEY,
        control_token=CONTROL_TOKEN,
        allowed_hosts=["policy.internal"],
        allowed_origins=["http://localhost:3000"],
    )
    return create_app(
        engine,
        tokenizer,
        served_model_name=MODEL_NAME,
        max_model_len=CONTEXT,
        control_routes=True,
        access=access,
        limits=ServeLimits(**limits),
        lora_root=tmp_path / "adapters",
    )


@pytest.fixture
async def guarded(engine, tiny_tokenizer, tmp_path):
    app = guarded_app(engine, tiny_tokenizer, tmp_path, max_body_bytes=4096, max_n=4, max_prompts=2, max_tokens=8)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        yield client


@pytest.mark.parametrize(
    "header, name",
    [("Example.COM:80", "example.com"), ("[::1]:8000", "::1"), ("localhost", "localhost"), ("host.", "host")],
)
def test_the_host_name_of_a_host_header_drops_the_port_and_case(header, name):
    assert host_name(header) == name


@pytest.mark.parametrize(
    "host, allowed",
    [
        ("127.0.0.1:8000", True),
        ("localhost:8000", True),
        ("[::1]:8000", True),
        ("10.1.2.3:8000", True),  # the bound host
        ("192.168.7.7", True),  # any IP literal: a DNS-rebinding page always sends its own domain name
        ("policy.internal:8000", True),  # --allowed-hosts
        ("attacker.example:8000", False),
        ("localhost.attacker.example", False),
        ("", False),
    ],
)
async def test_a_host_header_must_name_an_allowed_host(guarded, host, allowed):
    response = await guarded.get("/health", headers={"Host": host})
    assert response.status_code == (200 if allowed else 421)


@pytest.mark.parametrize(
    "origin, status",
    [
        ("http://127.0.0.1", 200),  # the server's own origin (the Host header the client sent)
        ("http://localhost:3000", 200),  # --allowed-origins
        ("http://attacker.example", 403),
        ("null", 403),
        ("http://127.0.0.1:9999", 403),  # another port is another origin
    ],
)
async def test_a_browser_origin_must_be_the_servers_own_or_allowed(guarded, origin, status):
    response = await guarded.post("/v1/completions", json=COMPLETION, headers={**API, "Origin": origin})
    assert response.status_code == status
    if status == 403:
        assert response.json()["error"]["type"] == "permission_error"


@pytest.mark.parametrize(
    "headers, status",
    [({}, 401), ({"Authorization": "Bearer wrong"}, 401), ({"Authorization": f"Basic {API_KEY}"}, 401), (API, 200)],
)
async def test_the_openai_routes_need_the_api_key(guarded, headers, status):
    assert (await guarded.post("/v1/completions", json=COMPLETION, headers=headers)).status_code == status
    assert (await guarded.get("/v1/models", headers=headers)).status_code == status


async def test_health_is_open_and_there_are_no_schema_or_docs_routes(guarded):
    assert (await guarded.get("/health")).json()["status"] == "ok"
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert (await guarded.get(path, headers=API)).status_code == 404, path


@pytest.mark.parametrize(
    "headers, status", [({}, 401), (API, 403), ({"Authorization": "Bearer wrong"}, 403), (CONTROL, 200)]
)
async def test_the_control_routes_need_the_control_token_not_the_api_key(guarded, headers, status):
    response = await guarded.post("/reset_prefix_cache", json={}, headers=headers)
    assert response.status_code == status


async def test_control_routes_are_absent_without_control_and_refused_without_a_token(engine, tiny_tokenizer):
    app = create_app(engine, tiny_tokenizer, served_model_name=MODEL_NAME, max_model_len=CONTEXT)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        for path in ("/sleep", "/update_weights", "/init_weight_update_communicator"):
            assert (await client.post(path, json={}, headers=CONTROL)).status_code == 404, path
        assert (await client.post("/v1/completions", json=COMPLETION)).status_code == 200  # no key set: open
    with pytest.raises(ValueError, match="control routes need a control token"):
        create_app(engine, tiny_tokenizer, served_model_name=MODEL_NAME, max_model_len=CONTEXT, control_routes=True)


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
async def test_a_body_that_is_not_declared_json_is_415(guarded, content_type):
    headers = {**CONTROL} if content_type is None else {**CONTROL, "Content-Type": content_type}
    response = await guarded.post("/sleep", content=b"{}", headers=headers)
    assert response.status_code == 415
    response = await guarded.post("/v1/completions", content=b"{}", headers={**headers, **API})
    assert response.status_code == 415


async def test_json_with_a_charset_or_a_json_suffix_is_accepted(guarded):
    for content_type in ("application/json; charset=utf-8", "application/vnd.skyrl+json"):
        headers = {**API, "Content-Type": content_type}
        body = b'{"model": "tiny", "prompt": [1], "max_tokens": 2}'
        response = await guarded.post("/v1/completions", content=body, headers=headers)
        assert response.status_code == 200, content_type


async def test_a_body_over_the_limit_is_413_by_its_length_or_as_it_streams(guarded):
    big = {**COMPLETION, "user": "x" * 5000}
    response = await guarded.post("/v1/completions", json=big, headers=API)
    assert response.status_code == 413
    assert "limit of 4096 bytes (--max-body-bytes)" in response.json()["error"]["message"]

    async def chunks():  # no Content-Length: the guard counts the bytes
        for _ in range(10):
            yield b" " * 1024

    headers = {**API, "Content-Type": "application/json"}
    assert (await guarded.post("/v1/completions", content=chunks(), headers=headers)).status_code == 413
    assert (await guarded.post("/v1/completions", json=COMPLETION, headers=API)).status_code == 200


@pytest.mark.parametrize(
    "body, param, flag",
    [
        ({**COMPLETION, "n": 5}, "n", "--max-n"),
        ({**COMPLETION, "prompt": [[1], [2], [3]]}, "prompt", "--max-prompts"),
        ({**COMPLETION, "max_tokens": 9}, "max_tokens", "--max-tokens"),
    ],
)
async def test_requests_over_a_limit_are_400_naming_the_field_and_flag(guarded, body, param, flag):
    response = await guarded.post("/v1/completions", json=body, headers=API)
    error = response.json()["error"]
    assert (response.status_code, error["param"]) == (400, param)
    assert flag in error["message"]


async def test_a_chat_without_max_tokens_generates_at_most_the_limit(guarded):
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
    response = await guarded.post("/v1/chat/completions", json=body, headers=API)
    assert response.json()["usage"]["completion_tokens"] == 8


async def test_a_full_waiting_list_is_429_with_retry_after(engine, tiny_tokenizer, tmp_path):
    app = guarded_app(engine, tiny_tokenizer, tmp_path, max_waiting=1)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        assert (await client.post("/sleep", json={}, headers=CONTROL)).status_code == 200
        waiting = asyncio.create_task(client.post("/v1/completions", json=COMPLETION, headers=API))
        while app.state.serving.gate.waiting < 1:
            await asyncio.sleep(0.01)
        refused = await client.post("/v1/completions", json=COMPLETION, headers=API)
        assert (refused.status_code, refused.headers["retry-after"]) == (429, "1")
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert (await client.post("/wake_up", json={}, headers=CONTROL)).status_code == 200
        assert (await waiting).status_code == 200


async def lora_request(client, path) -> httpx.Response:
    body = {"type": "lora", "lora_path": str(path), "weight_version": 1}
    return await client.post("/update_weights", json=body, headers=CONTROL)


async def test_lora_folders_outside_the_root_are_refused_after_following_symlinks_and_dots(guarded, tmp_path):
    root = tmp_path / "adapters"
    (root / "v1").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(outside, root / "link")
    for path in (outside, root / "link", root / ".." / "elsewhere", root / "missing", "/etc"):
        response = await lora_request(guarded, path)
        assert response.status_code == 403, path
        assert "not a folder under this server's --lora-root" in response.json()["error"]["message"]
    # A folder under the root reaches the engine (which then finds no adapter in it: 400 naming the folder).
    response = await lora_request(guarded, root / "v1")
    assert response.status_code == 400 and str(root / "v1") in response.json()["error"]["message"]


async def test_without_a_lora_root_every_lora_load_is_refused(engine, tiny_tokenizer, tmp_path):
    app = create_app(
        engine,
        tiny_tokenizer,
        served_model_name=MODEL_NAME,
        max_model_len=CONTEXT,
        control_routes=True,
        access=AccessPolicy(control_token=CONTROL_TOKEN),
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        response = await lora_request(client, tmp_path)
    assert response.status_code == 403
    assert "LoRA loading is off on this server (start it with --lora-root" in response.json()["error"]["message"]


async def test_a_cuda_ipc_update_is_refused_as_having_no_json_form(guarded):
    body = {"type": "cuda_ipc", "names": [], "dtypes": [], "shapes": [], "offsets": [], "ipc_handles": {"GPU-0": "x"}}
    response = await guarded.post("/update_weights", json=body, headers=CONTROL)
    assert response.status_code == 400
    assert "'cuda_ipc' weight-update request has no JSON form" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "dtype, shape, message",
    [
        ("float32", [10**12, 10**6], "model.embed_tokens.weight: the update has shape [1000000000000, 1000000]"),
        ("int64", None, "model.embed_tokens.weight: the update sends int64, the engine's parameter is torch.float32"),
    ],
)
async def test_a_broadcast_that_does_not_fit_the_model_is_refused_before_anything_is_allocated(
    guarded, engine, dtype, shape, message
):
    shape = shape or list(engine.model.get_parameter("model.embed_tokens.weight").shape)
    body = {"type": "broadcast", "names": ["model.embed_tokens.weight"], "dtypes": [dtype], "shapes": [shape]}
    response = await guarded.post("/update_weights", json=body, headers=CONTROL)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]
    body = {**body, "names": ["no.such.weight"], "shapes": [[1]]}
    response = await guarded.post("/update_weights", json=body, headers=CONTROL)
    assert response.status_code == 400 and "has no parameter 'no.such.weight'" in response.json()["error"]["message"]


def test_the_trainers_endpoint_needs_its_api_key_when_one_is_set(engine, tiny_tokenizer):
    endpoint = PolicyEndpoint(
        engine, tiny_tokenizer, served_model_name=MODEL_NAME, max_model_len=CONTEXT, port=0, api_key=API_KEY
    )
    endpoint.start()
    try:
        assert httpx.get(endpoint.url + "/v1/models").status_code == 401
        assert httpx.get(endpoint.url + "/v1/models", headers=API).json()["data"][0]["id"] == MODEL_NAME
        assert httpx.get(endpoint.url + "/health", headers={"Host": "attacker.example"}).status_code == 421
    finally:
        endpoint.stop()
