"""Fixtures for the worker tests: the tiny model, worker builders with typed configs, hand-laid-out batches."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config.schema import AlgorithmConfig, LoraConfig, ModelConfig, OptimizerConfig, PolicyConfig
from skyrl_train.testing import tiny_model_path
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.workers import PolicyWorker

PAD_ID = 0
# Four rows: left-padded prompts of 3, 5, 2, 4 tokens and right-padded responses of 4, 2, 3, 1 tokens.
PROMPT_LENGTHS = (3, 5, 2, 4)
RESPONSE_LENGTHS = (4, 2, 3, 1)


def _make_batch(
    prompt_lengths=PROMPT_LENGTHS, response_lengths=RESPONSE_LENGTHS, seed: int = 0, vocab: int = 1000
) -> TrainingInputBatch:
    generator = torch.Generator().manual_seed(seed)
    width_p, width_r = max(prompt_lengths), max(response_lengths)
    rows = len(prompt_lengths)
    sequences = torch.full((rows, width_p + width_r), PAD_ID, dtype=torch.long)
    attention_mask = torch.zeros_like(sequences)
    response_mask = torch.zeros((rows, width_r), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_lengths, response_lengths, strict=True)):
        sequences[i, width_p - p : width_p + r] = torch.randint(1, vocab, (p + r,), generator=generator)
        attention_mask[i, width_p - p : width_p + r] = 1
        response_mask[i, :r] = 1
    return TrainingInputBatch(
        {
            "sequences": sequences,
            "attention_mask": attention_mask,
            "response_mask": response_mask,
            "loss_mask": response_mask.float(),
            "advantages": torch.zeros((rows, width_r)),
        }
    )


@pytest.fixture(scope="session")
def model_path() -> str:
    return tiny_model_path()


@pytest.fixture
def make_batch():
    """``make_batch(prompt_lengths, response_lengths, seed)``: random token ids laid out as the trainer does,
    ``[left-padded prompt | right-padded response]``; ``loss_mask == response_mask``, zero advantages."""
    return _make_batch


@pytest.fixture
def batch() -> TrainingInputBatch:
    """The standard four-row batch (``PROMPT_LENGTHS`` / ``RESPONSE_LENGTHS``)."""
    return _make_batch()


def policy_config(
    path: str, *, lora_rank: int = 0, lora_dropout: float = 0.0, lr: float = 1e-3, **optimizer
) -> PolicyConfig:
    """``trainer.policy`` for ``path``: AdamW with constant LR, no weight decay or clipping unless overridden."""
    optimizer_config = {"lr": lr, "weight_decay": 0.0, "max_grad_norm": 0.0, "scheduler": "constant", **optimizer}
    return PolicyConfig(
        model=ModelConfig(path=path, lora=LoraConfig(rank=lora_rank, dropout=lora_dropout)),
        optimizer_config=OptimizerConfig(**optimizer_config),
    )


def algorithm_config(**overrides) -> AlgorithmConfig:
    """``trainer.algorithm`` with the schema defaults (regular PPO loss, token_mean) but no KL or entropy term."""
    return AlgorithmConfig(**{"use_kl_loss": False, **overrides})


@pytest.fixture
def build_policy(model_path: str):
    """``build_policy(lora_rank=0, lora_dropout=0.0, lr=1e-3, optimizer=None, temperature=1.0,
    num_training_steps=None, gradient_checkpointing=None, sample_packing=False, **algorithm) -> PolicyWorker``;
    ``gradient_checkpointing`` is None (off) or ``"reentrant"`` / ``"non_reentrant"``; ``dtype`` and ``device``
    (default float32 on the CPU) and ``autocast_dtype`` (default None) go to ``PolicyWorker``."""

    def build(
        *,
        lora_rank: int = 0,
        lora_dropout: float = 0.0,
        lr: float = 1e-3,
        optimizer: dict | None = None,
        temperature: float = 1.0,
        num_training_steps: int | None = None,
        gradient_checkpointing: str | None = None,
        sample_packing: bool = False,
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
        autocast_dtype: torch.dtype | None = None,
        **algorithm,
    ) -> PolicyWorker:
        return PolicyWorker(
            policy_config(model_path, lora_rank=lora_rank, lora_dropout=lora_dropout, lr=lr, **(optimizer or {})),
            algorithm_config(**algorithm),
            temperature=temperature,
            num_training_steps=num_training_steps,
            gradient_checkpointing=gradient_checkpointing is not None,
            gradient_checkpointing_use_reentrant=gradient_checkpointing == "reentrant",
            sample_packing=sample_packing,
            dtype=dtype,
            device=device,
            autocast_dtype=autocast_dtype,
        )

    return build


@pytest.fixture
def on_policy():
    """``on_policy(worker, batch)``: sets ``batch["action_log_probs"]`` from the worker's current weights."""

    def add_old_logprobs(worker: PolicyWorker, batch: TrainingInputBatch) -> TrainingInputBatch:
        batch["action_log_probs"] = worker.compute_logprobs(batch, micro_batch_size=batch.batch_size)
        return batch

    return add_old_logprobs
