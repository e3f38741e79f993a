"""Enum-like string keys are checked when the config loads, against what exists, before any model loads."""

from __future__ import annotations

import pytest
import torch
from transformers import get_scheduler
from transformers.trainer_utils import SchedulerType

from skyrl_train.algorithms.kl import KLEstimator
from skyrl_train.algorithms.reductions import LossReduction
from skyrl_train.config import ConfigError, load_config
from skyrl_train.config.schema import LoraConfig
from skyrl_train.config.validate import (
    KL_ESTIMATORS,
    LORA_INIT_METHODS,
    LOSS_REDUCTIONS,
    UNDRIVEN_SCHEDULERS,
    VLLM_DTYPES,
)
from skyrl_train.models.lora import peft_lora_config
from skyrl_train.testing import tiny_model  # noqa: F401

SCHEDULER = "trainer.policy.optimizer_config.scheduler"
USABLE = "'linear', 'cosine', 'cosine_with_restarts', 'polynomial', 'constant', 'constant_with_warmup', 'inverse_sqrt'"


def only_problem(*overrides: str) -> str:
    with pytest.raises(ConfigError) as error:
        load_config(list(overrides))
    (problem,) = error.value.problems
    return problem


def test_an_unknown_lr_scheduler_is_refused_with_the_usable_ones():
    assert only_problem(f"{SCHEDULER}=cosin") == (
        f"{SCHEDULER}='cosin' is not a transformers LR scheduler; usable: {USABLE}."
    )


def test_a_scheduler_the_trainer_cannot_step_is_refused_with_why():
    assert only_problem(f"{SCHEDULER}=reduce_lr_on_plateau") == (
        f"{SCHEDULER}='reduce_lr_on_plateau' cannot be used: its step needs a metric, and the trainer steps the "
        f"scheduler without one; usable: {USABLE}."
    )


def test_the_critics_scheduler_is_checked_too():
    problem = only_problem("trainer.critic.model.path=/c", "trainer.critic.optimizer_config.scheduler=warmup_stable")
    assert problem.startswith("trainer.critic.optimizer_config.scheduler='warmup_stable' is not a transformers LR")


@pytest.mark.parametrize("name", [s.value for s in SchedulerType if s.value not in UNDRIVEN_SCHEDULERS])
def test_every_usable_scheduler_builds_and_steps_as_the_trainer_drives_it(name):
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    scheduler = get_scheduler(name, optimizer, num_warmup_steps=2, num_training_steps=10)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] > 0


@pytest.mark.parametrize("name", sorted(UNDRIVEN_SCHEDULERS))
def test_every_refused_scheduler_fails_as_the_trainer_drives_it(name):
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    with pytest.raises((TypeError, ValueError)):
        scheduler = get_scheduler(name, optimizer, num_warmup_steps=2, num_training_steps=10)
        optimizer.step()
        scheduler.step()


def test_an_unknown_model_dtype_is_refused():
    problems = load_problems("generator.backend=vllm", "generator.model_dtype=fp32")
    assert (
        "generator.model_dtype must be one of 'auto', 'half', 'float16', 'bfloat16', 'float', 'float32', got 'fp32'."
        in problems
    )


def load_problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as error:
        load_config(list(overrides))
    return error.value.problems


def test_vllm_dtypes_are_vllms_own():
    vllm_config = pytest.importorskip("vllm.config.model", reason="needs vLLM (its own venv)")
    assert set(VLLM_DTYPES) == set(vllm_config.ModelDType.__args__)


def test_loss_reductions_and_kl_estimators_are_the_algorithms():
    assert set(LOSS_REDUCTIONS) == {r.value for r in LossReduction}
    assert set(KL_ESTIMATORS) == {k.value for k in KLEstimator}


def test_an_unknown_kl_estimator_is_refused():
    assert only_problem("trainer.algorithm.kl_estimator_type=k4") == (
        "trainer.algorithm.kl_estimator_type must be one of 'k1', 'k2', 'k3', 'abs', got 'k4'."
    )


def test_an_unknown_lora_init_method_is_refused():
    assert only_problem("trainer.policy.model.lora.rank=8", "trainer.policy.model.lora.init_method=kaimng") == (
        "trainer.policy.model.lora.init_method must be one of 'kaiming', 'gaussian', 'pissa', 'olora', 'orthogonal', "
        "got 'kaimng'."
    )


def test_pissas_fast_form_is_accepted():
    cfg = load_config(["trainer.policy.model.lora.rank=8", "trainer.policy.model.lora.init_method=pissa_niter_4"])
    assert cfg.trainer.policy.model.lora.init_method == "pissa_niter_4"


@pytest.mark.parametrize("init_method", [*LORA_INIT_METHODS, "pissa_niter_2"])
def test_every_accepted_lora_init_builds_an_adapter_on_the_tiny_model(tiny_model, init_method):  # noqa: F811
    from peft import get_peft_model

    from skyrl_train.models import load_causal_lm

    config = peft_lora_config(LoraConfig(rank=4, alpha=8, init_method=init_method), task_type="CAUSAL_LM")
    model = get_peft_model(load_causal_lm(tiny_model), config)
    assert any("lora_A" in name for name, _ in model.named_parameters())
