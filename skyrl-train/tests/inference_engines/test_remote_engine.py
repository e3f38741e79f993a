"""`RemoteInferenceEngine` and `InferenceEngineClient` against real servers: the project's OpenAI-compatible app
(with its control routes) over the tiny model, served on real sockets in this process."""

from __future__ import annotations

import socket

import httpx
import pytest
import torch
from fastapi import FastAPI, Request

from skyrl_train.inference_engines import HFInferenceEngine, SamplingParams
from skyrl_train.inference_engines.client import EngineUnavailableError, InferenceEngineClient, NoEngineLeftError
from skyrl_train.inference_engines.remote import RemoteInferenceEngine, completion_body
from skyrl_train.models import load_causal_lm
from skyrl_train.serve import AccessPolicy, BackgroundServer, create_app
from skyrl_train.testing import TEST_CONTROL_TOKEN, served_model
from skyrl_train.weight_sync import CudaIpcWeightUpdateRequest, WeightUpdateRequest

NAME = "tiny"
PROMPT = [1, 28, 5024, 314, 253, 11, 3023, 42]
SEEDED = SamplingParams(temperature=1.0, max_generate_length=8, seed=7, logprobs=0)


@pytest.fixture
async def server(tiny_model, tiny_tokenizer):
    async with served_model(tiny_model, tiny_tokenizer, NAME) as served:
        yield served


@pytest.fixture
async def two_servers(tiny_model, tiny_tokenizer):
    async with (
        served_model(tiny_model, tiny_tokenizer, NAME) as first,
        served_model(tiny_model, tiny_tokenizer, NAME) as second,
    ):
        yield [first, second]


def remote(url: str, tokenizer, **kwargs) -> RemoteInferenceEngine:
    kwargs.setdefault("control_token", TEST_CONTROL_TOKEN)
    return RemoteInferenceEngine(url.removeprefix("http://"), NAME, tokenizer, retry_backoff_s=0.01, **kwargs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_token_ids_and_logprobs_come_back_exactly_as_the_server_engine_sampled_them(server, tiny_tokenizer):
    server, engine = server
    direct = await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
    client = remote(server.url, tiny_tokenizer)
    out = await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
    assert out["response_ids"] == direct["response_ids"]
    torch.testing.assert_close(torch.tensor(out["response_logprobs"]), torch.tensor(direct["response_logprobs"]))
    assert out["responses"] == direct["responses"]
    assert (out["weight_versions"], out["retokenized"]) == ([0], [False])
    await client.teardown()


async def test_a_stop_string_ends_the_text_as_the_hf_engine_does(server, tiny_tokenizer):
    server, engine = server
    first = await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
    stop = tiny_tokenizer.decode(first["response_ids"][0][3:4]).strip() or tiny_tokenizer.decode(
        first["response_ids"][0][2:3]
    )
    params = SEEDED.replace(stop=[stop])
    direct = await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": params})
    client = remote(server.url, tiny_tokenizer)
    out = await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": params})
    assert (out["responses"], out["response_ids"]) == (direct["responses"], direct["response_ids"])
    assert out["responses"][0].endswith(stop)
    await client.teardown()


async def test_an_unreachable_server_is_retried_then_reported(tiny_tokenizer):
    url = f"127.0.0.1:{free_port()}"
    client = remote(url, tiny_tokenizer, max_retries=2)
    with pytest.raises(EngineUnavailableError, match=rf"http://{url} unreachable after 3 attempts \(ConnectError"):
        await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
    await client.teardown()


async def test_a_bad_request_is_not_retried_and_names_the_field(server, tiny_tokenizer):
    server, _ = server
    client = RemoteInferenceEngine(server.url, "no-such-model", tiny_tokenizer)
    with pytest.raises(httpx.HTTPStatusError, match="answered 404"):
        await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
    await client.teardown()


async def test_every_turn_of_a_session_reaches_the_same_server(two_servers, tiny_tokenizer):
    client = InferenceEngineClient([remote(s.url, tiny_tokenizer) for s, _ in two_servers])
    sessions = [f"7_{i}" for i in range(6)]
    for _ in range(2):  # two turns per session
        for session in sessions:
            await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED, "session_ids": [session]})
    routes = client.route(len(sessions), sessions)
    served = [engine.stats.finished_requests for _, engine in two_servers]
    assert served == [2 * routes.count(0), 2 * routes.count(1)]
    assert sorted(set(routes)) == [0, 1]  # these six sessions use both servers
    await client.teardown()


async def test_a_dead_server_is_taken_out_of_service_and_its_sessions_move_to_the_others(two_servers, tiny_tokenizer):
    engines = [remote(s.url, tiny_tokenizer, max_retries=1) for s, _ in two_servers]
    client = InferenceEngineClient(engines)
    sessions = [f"3_{i}" for i in range(6)]
    on_first = [s for s, engine in zip(sessions, client.route(6, sessions), strict=True) if engine == 0]
    two_servers[0][0].stop()
    with pytest.raises(EngineUnavailableError):
        await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED, "session_ids": on_first[:1]})
    assert list(client.dropped) == [0]
    out = await client.generate(
        {"prompt_token_ids": [PROMPT] * len(on_first), "sampling_params": SEEDED, "session_ids": on_first}
    )
    assert len(out["response_ids"]) == len(on_first)
    assert two_servers[1][1].stats.finished_requests == len(on_first)
    two_servers[1][0].stop()
    with pytest.raises(EngineUnavailableError):
        await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
    with pytest.raises(NoEngineLeftError, match=rf"engine 0: {engines[0].url} unreachable .*; engine 1: "):
        await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
    await client.teardown()


async def test_control_routes_label_the_weights_and_sleep_holds_requests_back(server, tiny_tokenizer):
    server, engine = server
    client = remote(server.url, tiny_tokenizer)
    await client.update_named_weights(WeightUpdateRequest(weight_version=5))
    assert (client.weight_version, engine.weight_version) == (5, 5)
    assert httpx.get(server.url + "/health").json() == {"status": "ok", "weight_version": 5}
    await client.sleep()
    await client.wake_up()
    await client.reset_prefix_cache()
    out = await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
    assert out["weight_versions"] == [5]
    await client.teardown()


async def test_a_server_without_control_routes_gets_a_clear_error(tiny_model, tiny_tokenizer):
    engine = HFInferenceEngine(load_causal_lm(tiny_model).eval(), tiny_tokenizer, seed=0)
    app = create_app(engine, tiny_tokenizer, served_model_name=NAME, max_model_len=8192)
    with BackgroundServer(app) as server:
        client = remote(server.url, tiny_tokenizer)
        with pytest.raises(RuntimeError, match="has no /update_weights route"):
            await client.update_named_weights(WeightUpdateRequest(weight_version=1))
        await client.teardown()
    await engine.teardown()


def text_only_proxy(upstream: str) -> FastAPI:
    """An OpenAI-compatible endpoint without vLLM's token-id extension: it forwards completions to `upstream` and
    answers with OpenAI's fields only (text, finish reason)."""
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        async with httpx.AsyncClient() as http:
            answer = (await http.post(upstream + "/v1/completions", json=body)).json()
        keep = ("index", "text", "finish_reason")
        return {**answer, "choices": [{k: c[k] for k in keep} for c in answer["choices"]]}

    return app


async def test_a_text_only_server_works_by_re_tokenising_and_says_so(server, tiny_tokenizer, caplog):
    server, _ = server
    with BackgroundServer(text_only_proxy(server.url)) as proxy:
        client = remote(proxy.url, tiny_tokenizer)
        out = await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
        await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
        await client.teardown()
    assert out["retokenized"] == [True]
    assert out["response_ids"] == [tiny_tokenizer.encode(out["responses"][0], add_special_tokens=False)]
    assert out["response_logprobs"] is None
    assert client.retokenized_responses == 2
    errors = [r for r in caplog.records if "RE-TOKENISED" in r.getMessage()]
    assert len(errors) == 1 and errors[0].levelname == "ERROR"


def test_the_completion_body_carries_the_sampling_params_and_the_token_extensions():
    params = SamplingParams(max_generate_length=5, temperature=0.7, top_k=20, stop=["</a>"], seed=3)
    params.additional_kwargs["ignore_eos"] = True
    assert completion_body("m", [[1, 2]], params) == {
        "model": "m",
        "prompt": [[1, 2]],
        "max_tokens": 5,
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": 20,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "return_token_ids": True,
        "include_stop_str_in_output": True,
        "logprobs": 0,
        "stop": ["</a>"],
        "seed": 3,
        "ignore_eos": True,
    }


async def test_the_client_sends_the_api_key_and_the_control_token_and_never_a_cuda_ipc_update(
    tiny_model, tiny_tokenizer
):
    engine = HFInferenceEngine(load_causal_lm(tiny_model).eval(), tiny_tokenizer, seed=0)
    access = AccessPolicy(api_key="sk-remote-test", control_token=TEST_CONTROL_TOKEN)  # pragma: allowlist secret
    app = create_app(
        engine, tiny_tokenizer, served_model_name=NAME, max_model_len=8192, control_routes=True, access=access
    )
    with BackgroundServer(app) as server:
        client = remote(server.url, tiny_tokenizer, api_key="sk-remote-test")  # pragma: allowlist secret
        out = await client.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
        assert len(out["response_ids"][0]) == 8
        await client.update_named_weights(WeightUpdateRequest(weight_version=4))
        assert engine.weight_version == 4
        ipc = CudaIpcWeightUpdateRequest(names=["w"], dtypes=["float32"], shapes=[[1]], offsets=[0])
        with pytest.raises(ValueError, match="is a remote engine: a 'cuda_ipc' weight-update request has no JSON"):
            await client.update_named_weights(ipc)
        await client.teardown()

        keyless = remote(server.url, tiny_tokenizer, control_token=None)
        with pytest.raises(httpx.HTTPStatusError, match="answered 401"):
            await keyless.generate({"prompt_token_ids": [PROMPT], "sampling_params": SEEDED})
        with pytest.raises(RuntimeError, match="refused the control call \\(401\\): set generator.remote_inference"):
            await keyless.update_named_weights(WeightUpdateRequest(weight_version=5))
        await keyless.teardown()
    await engine.teardown()
