"""Fixtures: the tiny random Llama (SmolLM2 tokenizer) as a trainer-side policy and as separate engine models."""

from __future__ import annotations

import torch

from skyrl_train.config.schema import AlgorithmConfig, LoraConfig, ModelConfig, PolicyConfig
from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.workers import PolicyWorker

PROMPT = [1, 28, 5024, 314, 253, 11, 3023, 42]


def policy_worker(model_path: str, lora_rank: int = 0) -> PolicyWorker:
    config = PolicyConfig(
        model=ModelConfig(path=model_path, lora=LoraConfig(rank=lora_rank, alpha=2 * lora_rank or 16))
    )
    return PolicyWorker(config, AlgorithmConfig())


def perturb(model: torch.nn.Module, seed: int, std: float = 0.05) -> None:
    """Move every trainable weight by N(0, std^2) noise, as a (large) training step would."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=generator) * std)


def assert_engine_logprobs_match_policy(output, policy: PolicyWorker) -> None:
    """The engine's logprobs of its (single) response equal the policy's recomputed ones."""
    logprobs = policy_logprobs(policy, PROMPT, output["response_ids"][0])
    torch.testing.assert_close(torch.tensor(output["response_logprobs"][0]), logprobs, rtol=0, atol=1e-4)


def broadcast_sender(engines, policy: PolicyWorker, **kwargs):
    """A gloo broadcast sender from `policy` to a client over `engines`."""
    from skyrl_train.inference_engines.client import InferenceEngineClient
    from skyrl_train.weight_sync import WeightSyncSender

    return WeightSyncSender(InferenceEngineClient(engines), policy, "broadcast", backend="gloo", timeout_s=60, **kwargs)


def policy_logprobs(policy: PolicyWorker, prompt: list[int], response: list[int]) -> torch.Tensor:
    """The policy's logprobs of `response` after `prompt` (what the trainer recomputes)."""
    ids = torch.tensor([prompt + response])
    batch = TrainingInputBatch(
        {
            "sequences": ids,
            "attention_mask": torch.ones_like(ids),
            "response_mask": torch.ones((1, len(response)), dtype=torch.long),
        }
    )
    return policy.compute_logprobs(batch, micro_batch_size=1)[0]
