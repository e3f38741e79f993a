"""Rollout logprobs from the hf engine match the trainer's logprobs of the same tokens (fp32, real model).

A real multi-turn rollout: SmolLM2-135M-Instruct wrapped with a LoRA adapter by a `PolicyWorker`, the `hf`
engine sharing that very module, the real `gsm8k_multi_turn` env, the real generator; then the trainer's data
path (`build_training_batch`) and `PolicyWorker.compute_logprobs`, compared with the metric the trainer logs.
Twice: with a fresh adapter (B = 0, so the adapter is a no-op) and with non-zero B matrices, as after training.
"""

import pytest
import torch

from skyrl_train.config import load_config
from skyrl_train.config.schema import AlgorithmConfig, LoraConfig, ModelConfig, PolicyConfig
from skyrl_train.generators.base import GeneratorInput, TrajectoryID
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.inference_engines.base import SamplingParams
from skyrl_train.inference_engines.hf.engine import HFInferenceEngine
from skyrl_train.models import DEFAULT_MODEL, load_tokenizer
from skyrl_train.testing import randomize_lora_b
from skyrl_train.trainer_utils import Rollouts, build_training_batch
from skyrl_train.workers import PolicyWorker
from skyrl_train.workers.metrics import rollout_train_logprob_diff

TEMPERATURE = 0.8


@pytest.mark.parametrize("adapter", ["fresh", "trained"])
async def test_mean_abs_logprob_gap_on_a_real_multi_turn_rollout_is_below_1e_3(adapter):
    torch.manual_seed(0)
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    policy = PolicyWorker(
        PolicyConfig(model=ModelConfig(path=DEFAULT_MODEL, lora=LoraConfig(rank=8, alpha=16))),
        AlgorithmConfig(use_kl_loss=False),
        temperature=TEMPERATURE,
    )
    if adapter == "trained":
        randomize_lora_b(policy.model)
    engine = HFInferenceEngine(policy.model, tokenizer, seed=0)
    cfg = load_config(["generator.max_turns=2", "generator.max_input_length=1024"], validate=False)
    generator = SkyRLGymGenerator(cfg.generator, cfg.environment.skyrl_gym, engine, tokenizer)
    question = [{"role": "user", "content": "Tom has 3 apples and buys 4 more. How many? End with #### <number>."}]
    try:
        output = await generator.generate(
            GeneratorInput(
                prompts=[question] * 4,
                env_classes=["gsm8k_multi_turn"] * 4,
                env_extras=[{"reward_spec": {"ground_truth": "7"}}] * 4,
                sampling_params=SamplingParams(max_generate_length=24, temperature=TEMPERATURE),
                trajectory_ids=[TrajectoryID("0", k) for k in range(4)],
            )
        )
    finally:
        await engine.teardown()

    batch, _ = build_training_batch(
        Rollouts(output, ["0"] * 4, ["gsm8k_multi_turn"] * 4, [{}] * 4), tokenizer.pad_token_id
    )
    train_logprobs = policy.compute_logprobs(batch, micro_batch_size=4)
    gap = rollout_train_logprob_diff(batch["rollout_logprobs"], train_logprobs, batch["loss_mask"])

    assert batch["loss_mask"].sum() >= 4 * 20  # a real rollout: every trajectory sampled most of its tokens
    assert gap["rollout_train_logprobs_abs_diff_mean"] < 1e-3
    with policy.model.disable_adapter():
        base_logprobs = policy.compute_logprobs(batch, micro_batch_size=4)
    adapter_effect = rollout_train_logprob_diff(base_logprobs, train_logprobs, batch["loss_mask"])
    if adapter == "trained":  # the adapter really changes what the engine and the trainer compute
        assert adapter_effect["rollout_train_logprobs_abs_diff_mean"] > 0.01
    else:
        assert adapter_effect["rollout_train_logprobs_abs_diff_mean"] == 0.0
