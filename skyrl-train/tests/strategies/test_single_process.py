"""`SingleProcess` builds the policy, the reference and the critic in this process from the config, on the tiny
model: which ones exist, what the reference is, and the arguments they get."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config import load_config
from skyrl_train.strategies import EnginePolicy, SingleProcess
from skyrl_train.testing import tiny_model  # noqa: F401
from skyrl_train.workers import CriticWorker, PolicyWorker, RefWorker


def strategy(model_path: str, *overrides: str) -> SingleProcess:
    cfg = load_config(
        [
            f"trainer.policy.model.path={model_path}",
            "trainer.device=cpu",
            "trainer.gradient_checkpointing=false",
            *overrides,
        ]
    )
    return SingleProcess(cfg)


def test_a_lora_policy_with_a_kl_term_gets_its_own_module_as_reference_and_no_critic(tiny_model):  # noqa: F811
    policy, ref, critic = strategy(tiny_model, "trainer.policy.model.lora.rank=4").build_workers(10)
    assert isinstance(policy, PolicyWorker) and policy.uses_lora
    assert isinstance(ref, RefWorker)
    assert ref.model is policy.model and ref.disable_adapter
    assert critic is None


def test_full_fine_tuning_with_a_kl_term_and_a_critic_path_gets_a_frozen_reference_model_and_a_critic(
    tiny_model,  # noqa: F811
):
    policy, ref, critic = strategy(
        tiny_model,
        f"trainer.critic.model.path={tiny_model}",
        "trainer.algorithm.advantage_estimator=gae",
        "generator.sampling_params.temperature=0.7",
    ).build_workers(10)
    assert not policy.uses_lora
    assert ref.model is not policy.model and not ref.disable_adapter
    assert not any(p.requires_grad for p in ref.model.parameters())
    assert isinstance(critic, CriticWorker)
    assert (policy.temperature, ref.temperature) == (0.7, 0.7)


def test_without_a_kl_term_there_is_no_reference(tiny_model):  # noqa: F811
    _, ref, _ = strategy(tiny_model, "trainer.algorithm.use_kl_loss=false").build_workers(10)
    assert ref is None


@pytest.mark.parametrize(("bf16", "autocast"), [("false", None), ("true", torch.bfloat16)])
def test_the_workers_live_on_the_strategys_device_in_its_precision(tiny_model, bf16, autocast):  # noqa: F811
    single = strategy(tiny_model, f"trainer.bf16={bf16}", f"trainer.critic.model.path={tiny_model}")
    workers = single.build_workers(10)
    # bf16 on the CPU: fp32 weights under bf16 autocast
    assert (single.device, single.dtype, single.precision.autocast) == (torch.device("cpu"), torch.float32, autocast)
    for worker in workers:
        param = next(worker.model.parameters())
        assert (param.device, param.dtype, worker.autocast_dtype) == (torch.device("cpu"), torch.float32, autocast)


def test_the_optimizer_steps_of_the_run_set_the_policys_lr_schedule(tiny_model):  # noqa: F811
    policy = strategy(tiny_model, "trainer.policy.optimizer_config.scheduler=linear").build_workers(4).policy
    (factor,) = policy.scheduler.lr_lambdas
    assert [factor(step) for step in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]  # linear decay to 0 over the 4 steps


def test_a_local_engine_generates_from_the_policy_itself_with_nothing_to_refresh(tiny_model):  # noqa: F811
    single = strategy(tiny_model, "trainer.algorithm.use_kl_loss=false")
    policy = single.build_workers(10).policy
    assert single.engine_policy(policy) == EnginePolicy(policy, None)
    assert single.engine_placement(policy) is None  # no placement group for colocated engines to share
