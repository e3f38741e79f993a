"""Weight sync to servers over HTTP (the routes `python -m skyrl_train.serve` has): full weights by gloo broadcast to
two servers, and a LoRA adapter by folder; the servers then report the new version and match the policy."""

from __future__ import annotations

import socket

import httpx
import pytest

from skyrl_train.config.schema import LoraConfig
from skyrl_train.inference_engines import SamplingParams
from skyrl_train.inference_engines.client import InferenceEngineClient
from skyrl_train.inference_engines.remote import RemoteInferenceEngine
from skyrl_train.testing import TEST_CONTROL_TOKEN, randomize_lora_b, served_model
from skyrl_train.weight_sync import WeightSyncSender

from .conftest import PROMPT, assert_engine_logprobs_match_policy, perturb, policy_worker

GREEDY = SamplingParams(temperature=0.0, max_generate_length=6, logprobs=0)


@pytest.fixture
async def servers(tiny_model, tiny_tokenizer, tmp_path):
    async with (
        served_model(tiny_model, tiny_tokenizer, lora_root=tmp_path) as first,
        served_model(tiny_model, tiny_tokenizer, lora_root=tmp_path) as second,
    ):
        yield [first[0], second[0]]


def remote(url: str, tokenizer, **kwargs) -> RemoteInferenceEngine:
    return RemoteInferenceEngine(url, "tiny", tokenizer, control_token=TEST_CONTROL_TOKEN, **kwargs)


async def test_a_broadcast_reaches_every_server_and_each_reports_the_new_version(tiny_model, tiny_tokenizer, servers):
    policy = policy_worker(tiny_model)
    perturb(policy.model, seed=5)
    remotes = [remote(s.url, tiny_tokenizer) for s in servers]
    sender = WeightSyncSender(InferenceEngineClient(remotes), policy, "broadcast", backend="gloo", timeout_s=60)

    await sender.sync(weight_version=3)

    for server, engine in zip(servers, remotes, strict=True):
        assert httpx.get(server.url + "/health").json()["weight_version"] == 3
        output = await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": GREEDY})
        assert output["weight_versions"] == [3]
        assert_engine_logprobs_match_policy(output, policy)
    await sender.close()
    for engine in remotes:
        await engine.teardown()


async def test_a_lora_adapter_reaches_a_server_by_folder(tiny_model, tiny_tokenizer, servers, tmp_path):
    policy = policy_worker(tiny_model, lora_rank=4)
    randomize_lora_b(policy.model, std=0.5, seed=6)
    engine = remote(servers[0].url, tiny_tokenizer)
    sender = WeightSyncSender(
        InferenceEngineClient([engine]),
        policy,
        "lora",
        lora_config=LoraConfig(rank=4, alpha=8),
        base_model_path=tiny_model,
        lora_sync_path=str(tmp_path),
    )

    await sender.sync(weight_version=1)

    output = await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": GREEDY})
    assert output["weight_versions"] == [1]
    assert_engine_logprobs_match_policy(output, policy)
    await engine.teardown()


async def test_a_lora_sync_goes_on_over_the_servers_left_when_one_is_dead(
    tiny_model, tiny_tokenizer, servers, tmp_path
):
    with socket.socket() as sock:  # a port nothing listens on: a killed server refuses connections
        sock.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    live = remote(servers[0].url, tiny_tokenizer)
    dead = remote(dead_url, tiny_tokenizer, max_retries=0)
    client = InferenceEngineClient([live, dead])
    policy = policy_worker(tiny_model, lora_rank=4)
    sender = WeightSyncSender(
        client,
        policy,
        "lora",
        lora_config=LoraConfig(rank=4, alpha=8),
        base_model_path=tiny_model,
        lora_sync_path=str(tmp_path),
    )

    await sender.sync(weight_version=2)

    assert httpx.get(servers[0].url + "/health").json()["weight_version"] == 2
    assert list(client.dropped) == [1]
    assert client.dropped[1].startswith(f"{dead_url} unreachable after 1 attempts (ConnectError")
    for engine in (live, dead):
        await engine.teardown()
