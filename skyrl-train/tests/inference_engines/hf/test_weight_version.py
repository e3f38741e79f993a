"""WeightVersion: every weight change of the policy bumps it, and the colocated hf engine never reuses a prefix cached
under an earlier version (real PolicyWorker updates, tiny model, full fine-tuning and a trained LoRA adapter)."""

from __future__ import annotations

import copy

import pytest
import torch

from skyrl_train.config.schema import AlgorithmConfig, LoraConfig, ModelConfig, OptimizerConfig, PolicyConfig
from skyrl_train.inference_engines import HFInferenceEngine, SamplingParams, WeightVersion
from skyrl_train.testing import randomize_lora_b
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.workers import PolicyWorker, RefWorker

SYSTEM = "You are a careful assistant. Use the tools, then answer in one short line. " * 3
GREEDY = SamplingParams(temperature=0.0, max_generate_length=4, additional_kwargs={"ignore_eos": True})


def one_row_batch(prompt: list[int], response: list[int], advantage: float = 0.0) -> TrainingInputBatch:
    sequences = torch.tensor([prompt + response])
    response_mask = torch.ones((1, len(response)), dtype=torch.long)
    return TrainingInputBatch(
        {
            "sequences": sequences,
            "attention_mask": torch.ones_like(sequences),
            "response_mask": response_mask,
            "loss_mask": response_mask.float(),
            "advantages": torch.full((1, len(response)), advantage),
        }
    )


async def generate(engine: HFInferenceEngine, prompt: list[int]) -> tuple[dict, int]:
    """Greedy output for `prompt`, and how many of its prompt tokens came from the prefix cache."""
    before = engine.stats.cached_prompt_tokens
    output = await engine.generate({"prompt_token_ids": [prompt], "sampling_params": GREEDY})
    return {key: value[0] for key, value in output.items()}, engine.stats.cached_prompt_tokens - before


@pytest.fixture
async def colocated(request, tiny_model, tiny_tokenizer):
    """(policy, engine, prompt): a PolicyWorker (LoRA rank `request.param`, B matrices non-zero; 0 = full fine-tuning),
    an engine sharing its module, and a prompt whose KV the engine has cached (a repeat of it is a cache hit)."""
    torch.manual_seed(0)
    policy_config = PolicyConfig(
        model=ModelConfig(path=tiny_model, lora=LoraConfig(rank=request.param)),
        optimizer_config=OptimizerConfig(lr=1e-2, weight_decay=0.0, scheduler="constant"),
    )
    policy = PolicyWorker(policy_config, AlgorithmConfig(use_kl_loss=False))
    if request.param:
        randomize_lora_b(policy.model)
    engine = HFInferenceEngine(policy.model, tiny_tokenizer, seed=0)
    prompt = tiny_tokenizer(SYSTEM).input_ids
    await generate(engine, prompt)
    _, cached = await generate(engine, prompt)
    assert cached == len(prompt) - 1  # same weights: the whole prompt but its last token is reused
    await engine.wait_idle()  # the trainer's turn (as `sleep` gives it, but keeping the cache under test)
    yield policy, engine, prompt
    await engine.teardown()


@pytest.mark.parametrize("colocated", [0, 4], ids=["full", "trained_lora"], indirect=True)
async def test_an_optimizer_step_makes_the_engine_miss_every_prefix_cached_before_it(colocated):
    policy, engine, prompt = colocated
    version = policy.weight_version.value
    policy.ppo_train(one_row_batch(prompt, [11, 12, 13], advantage=1.0), mini_batch_size=1, micro_batch_size=1)
    assert policy.weight_version.value == version + 1
    output, cached = await generate(engine, prompt)
    expected = policy.compute_logprobs(one_row_batch(prompt, output["response_ids"]), micro_batch_size=1)[0]
    assert (expected - torch.tensor(output["response_logprobs"])).abs().max().item() < 1e-4  # the new weights only
    assert cached == 0


@pytest.mark.parametrize("colocated", [4], ids=["trained_lora"], indirect=True)
async def test_a_checkpoint_load_makes_the_engine_miss_every_prefix_cached_before_it(colocated, tmp_path):
    policy, engine, prompt = colocated
    policy.save_checkpoint(tmp_path)
    version = policy.weight_version.value
    policy.load_checkpoint(tmp_path)
    assert policy.weight_version.value == version + 1
    _, cached = await generate(engine, prompt)
    assert cached == 0


@pytest.mark.parametrize("colocated", [4], ids=["trained_lora"], indirect=True)
async def test_a_reference_pass_with_the_adapter_disabled_makes_the_engine_miss_every_prefix_cached_before_it(
    colocated,
):
    policy, engine, prompt = colocated
    version = policy.weight_version.value
    RefWorker.sharing_policy(policy).compute_logprobs(one_row_batch(prompt, [11, 12]), micro_batch_size=1)
    assert policy.weight_version.value == version + 2  # base weights inside the pass, adapter weights again after it
    _, cached = await generate(engine, prompt)
    assert cached == 0


def test_the_version_lives_on_the_module_and_load_state_dict_bumps_it():
    model = torch.nn.Linear(2, 2)
    version = WeightVersion.of(model)
    assert WeightVersion.of(model) is version and version.value == 0
    model.load_state_dict(model.state_dict())
    assert version.value == 1
    with version.changed():
        assert version.value == 2
    assert version.value == 3


def test_a_tracked_optimizer_step_bumps_the_version():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    WeightVersion.of(model).track_optimizer(optimizer)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    optimizer.step()
    assert WeightVersion.of(model).value == 2


def test_a_deep_copy_of_the_module_counts_its_own_changes():
    model = torch.nn.Linear(2, 2)
    WeightVersion.of(model).bump()
    duplicate = copy.deepcopy(model)
    duplicate.load_state_dict(model.state_dict())
    assert (WeightVersion.of(model).value, WeightVersion.of(duplicate).value) == (1, 2)
