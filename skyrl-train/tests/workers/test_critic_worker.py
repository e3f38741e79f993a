"""CriticWorker: per-token values of the response, and value-loss updates that fit the returns."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config.schema import AlgorithmConfig, CriticConfig, LoraConfig, ModelConfig, OptimizerConfig
from skyrl_train.workers import CriticWorker


@pytest.fixture
def critic(model_path):
    config = CriticConfig(
        model=ModelConfig(path=model_path),
        optimizer_config=OptimizerConfig(lr=1e-2, weight_decay=0.0, max_grad_norm=1.0, scheduler="constant"),
    )
    return CriticWorker(config, AlgorithmConfig(value_clip=0.2, value_head_prefix="score"))


def test_values_have_the_response_shape_and_are_zero_on_padding(critic, batch):
    torch.nn.init.constant_(critic.model.score.bias, 0.5)  # the head starts at zero; make values visible
    values = critic.compute_values(batch, micro_batch_size=3)
    assert values.shape == batch["response_mask"].shape == (4, 4)
    assert torch.equal(values, 0.5 * batch["response_mask"])


def test_value_head_is_named_by_value_head_prefix(critic):
    assert {"score.weight", "score.bias"} <= {name for name, _ in critic.model.named_parameters()}


def test_critic_step_reduces_the_critic_loss(critic, batch):
    batch["values"] = critic.compute_values(batch, micro_batch_size=4)
    batch["returns"] = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0, 0], [1.0, 0.0, 1.0, 0], [0.8, 0, 0, 0]])
    first = critic.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    second = critic.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    # Values start at 0: loss = ½ · Σ R² / 10 tokens = ½ · (4 + 0.5 + 2 + 0.64) / 10 = 0.357.
    assert first["critic/critic_loss"] == pytest.approx(0.357, abs=1e-6)
    assert second["critic/critic_loss"] < first["critic/critic_loss"]
    assert {"critic/values_mean", "critic/values_clipfrac", "critic/critic_lr", "critic/grad_norm"} <= second.keys()


def test_critic_checkpoint_restores_the_value_head(critic, batch, model_path, tmp_path):
    torch.nn.init.constant_(critic.model.score.bias, 0.25)
    critic.save_checkpoint(tmp_path)
    fresh = CriticWorker(CriticConfig(model=ModelConfig(path=model_path)), AlgorithmConfig(value_head_prefix="score"))
    fresh.load_checkpoint(tmp_path)
    assert torch.equal(fresh.compute_values(batch, 4), critic.compute_values(batch, 4))


def test_lora_critic_trains_the_adapter_and_the_value_head_only(model_path):
    config = CriticConfig(
        model=ModelConfig(path=model_path, lora=LoraConfig(rank=4)), optimizer_config=OptimizerConfig(lr=1e-2)
    )
    critic = CriticWorker(config, AlgorithmConfig(value_head_prefix="value_head"))
    trainable = {name for name, p in critic.model.named_parameters() if p.requires_grad}
    assert {"value_head.weight", "value_head.bias"} <= trainable
    assert all("lora_" in name for name in trainable - {"value_head.weight", "value_head.bias"})
