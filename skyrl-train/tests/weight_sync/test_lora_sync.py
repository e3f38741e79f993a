"""LoRA sync: the trainer saves its adapter in peft's format under lora_sync_path; an engine with the plain base model
loads it from there (no tensors travel)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from skyrl_train.config.schema import LoraConfig
from skyrl_train.inference_engines import HFInferenceEngine, SamplingParams
from skyrl_train.inference_engines.client import InferenceEngineClient
from skyrl_train.models import load_causal_lm
from skyrl_train.testing import randomize_lora_b
from skyrl_train.weight_sync import LoraLoadRequest, WeightSyncSender
from skyrl_train.weight_sync.lora import save_adapter

from .conftest import PROMPT, assert_engine_logprobs_match_policy, policy_worker

GREEDY = SamplingParams(temperature=0.0, max_generate_length=6, logprobs=0)
RANK = 4


@pytest.fixture
async def engine(tiny_model, tiny_tokenizer):
    engine = HFInferenceEngine(load_causal_lm(tiny_model).eval(), tiny_tokenizer, seed=0)
    yield engine
    await engine.teardown()


def lora_sender(engine, policy, tiny_model, sync_path) -> WeightSyncSender:
    return WeightSyncSender(
        InferenceEngineClient([engine]),
        policy,
        "lora",
        lora_config=LoraConfig(rank=RANK, alpha=2 * RANK),
        base_model_path=tiny_model,
        lora_sync_path=str(sync_path),
    )


async def generate(engine):
    return await engine.generate({"prompt_token_ids": [PROMPT], "sampling_params": GREEDY})


async def test_after_a_lora_sync_the_engine_generates_with_the_trained_adapter(tiny_model, engine, tmp_path):
    policy = policy_worker(tiny_model, lora_rank=RANK)
    randomize_lora_b(policy.model, std=0.5, seed=1)  # a trained adapter, far from the base model
    base = (await generate(engine))["response_ids"][0]

    await lora_sender(engine, policy, tiny_model, tmp_path).sync(weight_version=2)

    assert [p.name for p in tmp_path.iterdir()] == ["weight_version_2"]
    output = await generate(engine)
    assert output["weight_versions"] == [2]
    assert output["response_ids"][0] != base
    assert_engine_logprobs_match_policy(output, policy)


async def test_the_next_lora_sync_replaces_the_adapter_and_the_older_folder(tiny_model, engine, tmp_path):
    policy = policy_worker(tiny_model, lora_rank=RANK)
    sender = lora_sender(engine, policy, tiny_model, tmp_path)
    randomize_lora_b(policy.model, std=0.5, seed=1)
    await sender.sync(weight_version=1)
    randomize_lora_b(policy.model, std=0.5, seed=2)

    await sender.sync(weight_version=2)

    assert [p.name for p in tmp_path.iterdir()] == ["weight_version_2"]
    output = await generate(engine)
    assert output["weight_versions"] == [2]
    assert_engine_logprobs_match_policy(output, policy)


def test_the_saved_adapter_is_what_peft_saves_for_the_same_model(tiny_model, tmp_path):
    policy = policy_worker(tiny_model, lora_rank=RANK)
    randomize_lora_b(policy.model, seed=3)
    save_adapter(policy.trainable_state_dict(), tmp_path / "ours", LoraConfig(rank=RANK, alpha=2 * RANK), tiny_model)
    policy.model.save_pretrained(tmp_path / "peft")
    ours = load_file(tmp_path / "ours" / "adapter_model.safetensors")
    peft = load_file(tmp_path / "peft" / "adapter_model.safetensors")
    assert sorted(ours) == sorted(peft)
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in ours
    for name in peft:
        torch.testing.assert_close(ours[name], peft[name], rtol=0, atol=0)


async def test_an_adapter_of_another_layout_is_refused(tiny_model, engine, tmp_path):
    policy = policy_worker(tiny_model, lora_rank=RANK)
    await lora_sender(engine, policy, tiny_model, tmp_path).sync(weight_version=1)
    other = policy_worker(tiny_model, lora_rank=8)
    folder = save_adapter(other.trainable_state_dict(), tmp_path / "r8", LoraConfig(rank=8, alpha=16), tiny_model)
    with pytest.raises(ValueError, match="another LoRA layout"):
        await engine.update_named_weights(LoraLoadRequest(lora_path=str(folder), weight_version=2))
    assert engine.weight_version == 1
