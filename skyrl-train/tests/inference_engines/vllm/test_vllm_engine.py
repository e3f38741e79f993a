"""The project's vLLM engines (real vLLM, a real local Ray cluster, a tiny random Llama): token ids in and out,
logprobs against the trainer's, stop strings, seeds, abort, weight sync (LoRA and full), sleep on CPU.

Marked `vllm` (excluded from the default run). Needs the vLLM venv (`bash scripts/setup_vllm.sh`):

    .venv/vllm/bin/python -m pytest -m vllm skyrl-train/tests/inference_engines/vllm

Tolerance: the engine runs the model in fp32, as the trainer (`PolicyWorker`) does here; its sampled-token logprobs
must equal the trainer's ``log_softmax(logits / T)`` within `LOGPROB_ATOL` (vLLM's CPU kernels sum in another order).
"""

from __future__ import annotations

import asyncio
import os

import pytest
import torch

from skyrl_gym.common.stop_reasons import StopReason
from skyrl_train.config import load_config
from skyrl_train.config.schema import AlgorithmConfig, LoraConfig, ModelConfig, PolicyConfig
from skyrl_train.inference_engines import SamplingParams
from skyrl_train.models import load_causal_lm, load_tokenizer
from skyrl_train.models.tiny import make_tiny_causal_lm
from skyrl_train.testing import randomize_lora_b, trainer_logprobs
from skyrl_train.workers import PolicyWorker

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

LOGPROB_ATOL = 1e-3
LORA_RANK = 8
PROMPTS = ["Hello", "The capital of France is", "1 2 3 4 5 6 7 8 9 10 11 12", "Once upon a time, in a land far away,"]


@pytest.fixture(scope="module")
def model_path() -> str:
    """A tiny random Llama whose head size (32) vLLM's CPU attention supports (the standard tiny model's 16 is not)."""
    return make_tiny_causal_lm(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, intermediate_size=256)


@pytest.fixture(scope="module")
def tokenizer(model_path):
    return load_tokenizer(model_path)


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=True)
    yield
    ray.shutdown()


def engine_config(model_path: str, *overrides: str):
    return load_config(
        [
            f"trainer.policy.model.path={model_path}",
            "generator.backend=vllm",
            "trainer.placement.colocate_all=false",
            "generator.model_dtype=float32",
            "generator.max_num_seqs=8",
            "generator.weight_sync_backend=gloo",
            "+generator.engine_init_kwargs.max_model_len=1024",
            f"+generator.engine_init_kwargs.kv_cache_memory_bytes={256 * 2**20}",
            *overrides,
        ]
    )


def start_engines(cfg, tokenizer):
    """The project's vLLM engines (Ray actors) behind the routing client, as `BasePPOExp.make_vllm_engines` builds
    them."""
    from skyrl_train.inference_engines.client import InferenceEngineClient
    from skyrl_train.inference_engines.vllm.ray_engine import create_vllm_engines

    return InferenceEngineClient(create_vllm_engines(cfg, tokenizer))


@pytest.fixture(scope="module")
def engines(ray_cluster, model_path, tokenizer):
    client = start_engines(engine_config(model_path), tokenizer)
    yield client
    asyncio.run(client.teardown())


@pytest.fixture(scope="module")
def lora_engines(ray_cluster, model_path, tokenizer):
    client = start_engines(engine_config(model_path, f"trainer.policy.model.lora.rank={LORA_RANK}"), tokenizer)
    yield client
    asyncio.run(client.teardown())


def trainer(model_path: str, temperature: float, lora_rank: int = 0) -> PolicyWorker:
    """The trainer's policy worker (fp32), whose logprobs the engine's must match."""
    lora = LoraConfig(rank=lora_rank, alpha=2 * lora_rank)
    return PolicyWorker(
        PolicyConfig(model=ModelConfig(path=model_path, lora=lora)), AlgorithmConfig(), temperature=temperature
    )


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text).input_ids


def generate(group, prompts: list[list[int]], params: SamplingParams) -> dict:
    return asyncio.run(group.generate({"prompt_token_ids": prompts, "sampling_params": params}))


def assert_logprobs_match(policy: PolicyWorker, prompts, output):
    for prompt, response, logprobs in zip(prompts, output["response_ids"], output["response_logprobs"], strict=True):
        assert len(logprobs) == len(response) > 0
        expected = trainer_logprobs(policy, prompt, response)
        torch.testing.assert_close(torch.tensor(logprobs), expected, atol=LOGPROB_ATOL, rtol=0)


def test_greedy_token_ids_equal_transformers_generate(engines, model_path, tokenizer):
    model = load_causal_lm(model_path).eval()
    prompts = [ids(tokenizer, text) for text in PROMPTS]
    params = SamplingParams(temperature=0.0, max_generate_length=12, additional_kwargs={"ignore_eos": True})
    output = generate(engines, prompts, params)
    for prompt, response in zip(prompts, output["response_ids"], strict=True):
        expected = model.generate(torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False)
        assert response == expected[0, len(prompt) :].tolist()
    assert output["stop_reasons"] == [StopReason.LENGTH] * len(PROMPTS)
    assert output["responses"] == [tokenizer.decode(r, skip_special_tokens=True) for r in output["response_ids"]]
    assert output["weight_versions"] == [0] * len(PROMPTS)
    assert_logprobs_match(trainer(model_path, temperature=1.0), prompts, output)  # greedy: T = 0 counts as 1


def test_sampled_token_logprobs_match_the_trainers_fp32_logprobs(engines, model_path, tokenizer):
    prompts = [ids(tokenizer, text) for text in PROMPTS]
    params = SamplingParams(temperature=0.7, max_generate_length=24, seed=1, additional_kwargs={"ignore_eos": True})
    output = generate(engines, prompts, params)
    assert_logprobs_match(trainer(model_path, temperature=0.7), prompts, output)


def test_a_stop_string_ends_the_response_and_stays_in_its_text(engines, tokenizer):
    prompt = ids(tokenizer, PROMPTS[1])
    free = generate(
        engines,
        [prompt],
        SamplingParams(temperature=0.0, max_generate_length=16, additional_kwargs={"ignore_eos": True}),
    )
    full_ids = free["response_ids"][0]
    # the text of the first 3 tokens is a stop string that the greedy continuation must hit
    stop = tokenizer.decode(full_ids[1:3], skip_special_tokens=True)
    assert stop.strip(), "the tiny model's greedy tokens 1-2 decode to whitespace; pick other tokens"
    params = SamplingParams(
        temperature=0.0, max_generate_length=16, stop=[stop], additional_kwargs={"ignore_eos": True}
    )
    out = generate(engines, [prompt], params)
    assert out["stop_reasons"] == [StopReason.STOP]
    assert out["responses"][0].endswith(stop)
    assert out["response_ids"][0] == full_ids[: len(out["response_ids"][0])]
    assert len(out["response_ids"][0]) < len(full_ids)


def test_a_request_seed_makes_sampling_reproducible(engines, tokenizer):
    prompt = ids(tokenizer, PROMPTS[0])

    def sample(seed):
        params = SamplingParams(
            temperature=1.0, max_generate_length=16, seed=seed, additional_kwargs={"ignore_eos": True}
        )
        return generate(engines, [prompt], params)["response_ids"][0]

    first = sample(11)
    assert sample(11) == first
    # a random 128-wide model over a 49k vocabulary: two seeds drawing the same 16 tokens is practically impossible
    assert sample(12) != first


def test_abort_returns_the_tokens_so_far_with_stop_reason_abort(engines, tokenizer):
    prompt = ids(tokenizer, PROMPTS[3])
    params = SamplingParams(temperature=0.0, max_generate_length=900, additional_kwargs={"ignore_eos": True})

    async def run():
        task = asyncio.create_task(engines.generate({"prompt_token_ids": [prompt], "sampling_params": params}))
        await asyncio.sleep(3)
        await engines.abort_generation()
        return await task

    out = asyncio.run(run())
    assert out["stop_reasons"] == [StopReason.ABORT]
    assert 0 < len(out["response_ids"][0]) < 900
    assert len(out["response_logprobs"][0]) == len(out["response_ids"][0])


def test_after_a_full_weight_sync_the_engine_logprobs_match_the_updated_trainer(engines, model_path, tokenizer):
    from skyrl_train.weight_sync import WeightSyncSender

    policy = trainer(model_path, temperature=0.7)
    prompts = [ids(tokenizer, text) for text in PROMPTS[:2]]
    params = SamplingParams(temperature=0.7, max_generate_length=16, seed=2, additional_kwargs={"ignore_eos": True})
    assert_logprobs_match(policy, prompts, generate(engines, prompts, params))
    with torch.no_grad():  # as a (large) training step would
        generator = torch.Generator().manual_seed(0)
        for param in policy.model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    sender = WeightSyncSender(engines, policy, "broadcast", backend="gloo", timeout_s=120)

    async def sync_and_generate():
        await sender.sync(1)
        output = await engines.generate({"prompt_token_ids": prompts, "sampling_params": params})
        await sender.close()
        return output

    after = asyncio.run(sync_and_generate())
    assert after["weight_versions"] == [1, 1]
    assert_logprobs_match(policy, prompts, after)


def test_after_a_lora_sync_the_engine_logprobs_match_the_trainers_adapter(
    lora_engines, model_path, tokenizer, tmp_path
):
    from skyrl_train.weight_sync import WeightSyncSender

    policy = trainer(model_path, temperature=0.7, lora_rank=LORA_RANK)
    prompts = [ids(tokenizer, text) for text in PROMPTS[:2]]
    params = SamplingParams(temperature=0.7, max_generate_length=16, seed=3, additional_kwargs={"ignore_eos": True})
    assert_logprobs_match(policy, prompts, generate(lora_engines, prompts, params))  # a fresh adapter changes nothing
    randomize_lora_b(policy.model, std=0.2)  # as after training
    sender = WeightSyncSender(
        lora_engines,
        policy,
        "lora",
        lora_config=LoraConfig(rank=LORA_RANK, alpha=2 * LORA_RANK),
        base_model_path=model_path,
        lora_sync_path=str(tmp_path / "lora"),
    )
    asyncio.run(sender.sync(1))
    after = generate(lora_engines, prompts, params)
    assert after["weight_versions"] == [1, 1]
    assert_logprobs_match(policy, prompts, after)


def test_colocated_engines_are_refused_on_a_cpu_cluster_for_lack_of_sleep_mode(ray_cluster, model_path, tokenizer):
    cfg = engine_config(model_path, "trainer.placement.colocate_all=true")
    with pytest.raises(ValueError, match="trainer.placement.colocate_all=false"):
        start_engines(cfg, tokenizer)
