"""Effects of config keys no other test showed: each test builds the real part from its typed config section, with
non-default values, on the tiny model, and checks the value changed what the part does."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config.schema import (
    AlgorithmConfig,
    CriticConfig,
    LoraConfig,
    ModelConfig,
    OptimizerConfig,
    PolicyConfig,
    RefConfig,
    RefModelConfig,
)
from skyrl_train.testing import tiny_model_path
from skyrl_train.workers import CriticWorker, PolicyWorker, RefWorker


@pytest.fixture(scope="module")
def tiny() -> str:
    return tiny_model_path()


def build(role: str, path: str, *, lora: LoraConfig | None = None, optimizer: OptimizerConfig | None = None, **kw):
    """A policy or critic worker on `path` from its typed section; full fine-tuning and defaults unless given."""
    model = ModelConfig(path=path, lora=lora or LoraConfig())
    optimizer = optimizer or OptimizerConfig()
    algorithm = AlgorithmConfig(use_kl_loss=False)
    if role == "policy":
        return PolicyWorker(
            PolicyConfig(model=model, optimizer_config=optimizer, **kw), algorithm, num_training_steps=10
        )
    return CriticWorker(CriticConfig(model=model, optimizer_config=optimizer, **kw), algorithm, num_training_steps=10)


def _lora_modules(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    return {name: module for name, module in model.named_modules() if hasattr(module, "lora_A")}


@pytest.mark.parametrize("role", ["policy", "critic"])
def test_lora_settings_shape_the_adapter(tiny, role):
    lora = LoraConfig(
        rank=4,
        alpha=32,
        dropout=0.25,
        target_modules=["q_proj", "v_proj", "o_proj"],
        exclude_modules=["o_proj"],
        init_method="gaussian",
    )
    torch.manual_seed(0)
    modules = _lora_modules(build(role, tiny, lora=lora).model)
    # 2 layers x (q_proj, v_proj): o_proj is targeted but excluded, nothing else is targeted.
    assert sorted(name.rsplit(".", 1)[-1] for name in modules) == ["q_proj", "q_proj", "v_proj", "v_proj"]
    for module in modules.values():
        assert module.r["default"] == 4
        assert module.scaling["default"] == 32 / 4  # alpha / rank
        assert module.lora_dropout["default"].p == 0.25
        # gaussian init: A ~ N(0, 1/rank) (std 0.25); peft's default (kaiming) would give std 1/sqrt(3 x 64) ~ 0.07.
        std = module.lora_A["default"].weight.std().item()
        assert 0.18 < std < 0.32, std
        assert torch.count_nonzero(module.lora_B["default"].weight) == 0


@pytest.mark.parametrize("role", ["policy", "critic"])
def test_optimizer_settings_reach_adamw_and_the_warmup_schedule(tiny, role):
    optimizer = OptimizerConfig(
        lr=0.5, adam_betas=[0.5, 0.75], weight_decay=0.3, num_warmup_steps=4, scheduler="linear", max_grad_norm=2.5
    )
    worker = build(role, tiny, optimizer=optimizer)
    group = worker.optimizer.param_groups[0]
    assert (group["betas"], group["weight_decay"], worker.max_grad_norm) == ((0.5, 0.75), 0.3, 2.5)
    lrs = []
    for _ in range(3):
        lrs.append(worker.lr)
        worker.optimizer.step()
        worker.scheduler.step()
    assert lrs == [0.0, 0.5 * 1 / 4, 0.5 * 2 / 4]  # linear warmup over 4 steps to lr


@pytest.mark.parametrize("role", ["policy", "critic", "ref"])
def test_model_config_kwargs_are_set_on_the_loaded_model_config(tiny, role):
    kwargs = {"attention_dropout": 0.125}
    if role == "ref":
        policy = build("policy", tiny)
        ref_config = RefConfig(model=RefModelConfig(path=tiny), model_config_kwargs=kwargs)
        model = RefWorker.for_policy(policy, ref_config).model
        assert policy.model.config.attention_dropout == 0.0  # the policy's own config is untouched
    else:
        model = build(role, tiny, model_config_kwargs=kwargs).model
    assert model.config.attention_dropout == 0.125
