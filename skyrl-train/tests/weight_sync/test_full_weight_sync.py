"""Full-weight sync by broadcast over gloo (CPU): a trainer-side policy and two engines with models of their own."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.inference_engines import HFInferenceEngine, SamplingParams
from skyrl_train.inference_engines.client import EngineUnavailableError, InferenceEngineClient
from skyrl_train.models import load_causal_lm
from skyrl_train.testing import tiny_model_path
from skyrl_train.weight_sync import BroadcastWeightUpdateRequest, WeightSyncSender, WeightUpdateRequest

from .conftest import PROMPT, assert_engine_logprobs_match_policy, broadcast_sender, perturb, policy_worker

GREEDY = SamplingParams(temperature=0.0, max_generate_length=6, logprobs=0)


@pytest.fixture
async def engines(tiny_model, tiny_tokenizer):
    engines = [HFInferenceEngine(load_causal_lm(tiny_model).eval(), tiny_tokenizer, seed=0) for _ in range(2)]
    yield engines
    for engine in engines:
        await engine.teardown()


async def generate(engine, prompt=PROMPT, params=GREEDY):
    return await engine.generate({"prompt_token_ids": [prompt], "sampling_params": params})


async def test_a_broadcast_sync_gives_every_engine_the_policy_weights_and_version(tiny_model, engines):
    policy = policy_worker(tiny_model)
    perturb(policy.model, seed=1)
    sender = broadcast_sender(engines, policy, chunk_bytes=256 * 1024)

    await sender.sync(weight_version=1)

    expected = dict(policy.model.named_parameters())
    for engine in engines:
        assert engine.weight_version == 1
        for name, param in engine.model.named_parameters():
            torch.testing.assert_close(param, expected[name], rtol=0, atol=0)
        output = await generate(engine)
        assert output["weight_versions"] == [1]
        assert_engine_logprobs_match_policy(output, policy)
    await sender.close()


async def test_the_next_sync_reuses_the_group_and_moves_the_version_on(tiny_model, engines):
    policy = policy_worker(tiny_model)
    sender = broadcast_sender(engines, policy)
    await sender.sync(weight_version=0)
    group = sender.group
    before = (await generate(engines[0]))["response_ids"][0]
    perturb(policy.model, seed=2, std=0.5)

    await sender.sync(weight_version=1)

    assert sender.group is group
    output = await generate(engines[1])
    assert output["weight_versions"] == [1]
    assert output["response_ids"][0] != before  # the engines generate with the moved weights
    assert_engine_logprobs_match_policy(output, policy)
    await sender.close()


async def test_when_an_engine_is_out_of_service_the_group_is_formed_again_over_the_rest(tiny_model, engines):
    policy = policy_worker(tiny_model)
    sender = broadcast_sender(engines, policy)
    await sender.sync(weight_version=0)
    assert sender.group.info.world_size == 3
    sender.engines.dropped[0] = "killed"  # what the client records when a remote engine stays unreachable
    perturb(policy.model, seed=3)

    await sender.sync(weight_version=1)

    assert sender.group.info.world_size == 2
    assert (engines[0].weight_version, engines[1].weight_version) == (0, 1)
    await sender.close()


@pytest.mark.parametrize(
    "name, shape, error, message",
    [
        ("model.no_such_layer.weight", [3], KeyError, "no parameter 'model.no_such_layer.weight'"),
        ("model.embed_tokens.weight", [10**12, 64], ValueError, "the update has shape \\[1000000000000, 64\\]"),
    ],
)
async def test_an_engine_refuses_a_request_that_does_not_fit_its_model_before_receiving_anything(
    tiny_model, engines, name, shape, error, message
):
    policy = policy_worker(tiny_model)
    sender = broadcast_sender(engines[:1], policy)
    await sender.sync(weight_version=0)
    request = BroadcastWeightUpdateRequest(names=[name], dtypes=["float32"], shapes=[shape], weight_version=9)
    with pytest.raises(error, match=message):
        await engines[0].update_named_weights(request)
    assert engines[0].weight_version == 0
    perturb(policy.model, seed=3)  # nothing was taken from the group: the next sync goes through it as usual
    await sender.sync(weight_version=1)
    assert engines[0].weight_version == 1
    assert_engine_logprobs_match_policy(await generate(engines[0]), policy)
    await sender.close()


async def test_a_sync_to_an_engine_whose_model_differs_fails_with_the_engines_reason(engines):
    policy = policy_worker(tiny_model_path(intermediate_size=96))  # the engines' models have 128
    sender = WeightSyncSender(InferenceEngineClient(engines[:1]), policy, "broadcast", backend="gloo", timeout_s=3)
    with pytest.raises(
        ValueError, match="mlp.gate_proj.weight: the update has shape \\[96, 64\\], the engine's \\[128, 64\\]"
    ):
        await sender.sync(weight_version=1)
    assert engines[0].weight_version == 0
    await sender.close()


async def test_a_version_only_request_labels_the_weights_of_an_engine_sharing_the_policy_module(
    tiny_model, tiny_tokenizer
):
    policy = policy_worker(tiny_model)
    engine = HFInferenceEngine(policy.model, tiny_tokenizer, seed=0)
    sender = WeightSyncSender(engine, policy, "shared")
    perturb(policy.model, seed=4)
    policy.weight_version.bump()  # what an optimizer step does
    assert engine.weight_version is None  # changed weights no sync has named yet

    await sender.sync(weight_version=4)

    assert engine.weight_version == 4
    assert (await generate(engine))["weight_versions"] == [4]
    with pytest.raises(ValueError, match="cannot carry tensors"):
        await engine.update_named_weights(WeightUpdateRequest(names=["x"], dtypes=["float32"], shapes=[[1]]))
    await engine.teardown()


async def test_a_sync_with_no_engine_left_names_every_dropped_engine(tiny_model, engines):
    sender = broadcast_sender(engines, policy_worker(tiny_model))
    sender.engines.dropped.update({0: "ConnectError: refused", 1: "ReadError: reset"})
    with pytest.raises(EngineUnavailableError, match="engine 0: ConnectError: refused; engine 1: ReadError: reset"):
        await sender.sync(weight_version=1)


async def test_an_engine_in_a_group_joins_another_only_when_told_to_override(tiny_model, engines):
    sender = broadcast_sender(engines[:1], policy_worker(tiny_model))
    await sender.sync(weight_version=0)
    info = sender.group.info.for_engine(0, 1)
    with pytest.raises(RuntimeError, match="already in a weight-update group"):
        await engines[0].init_weight_update_communicator(info)
    await sender.close()

    # A new trainer (e.g. a restarted run) while the engine is still in the old group: override_existing lets it in.
    stale = broadcast_sender(engines[:1], policy_worker(tiny_model))
    await stale.sync(weight_version=0)
    fresh = broadcast_sender(engines[:1], policy_worker(tiny_model), override_existing=True)
    await fresh.sync(weight_version=1)
    assert engines[0].weight_version == 1
    await fresh.close()
