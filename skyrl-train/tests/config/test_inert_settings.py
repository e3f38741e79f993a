"""Settings that would do nothing in the config at hand are refused, naming the key and what would make it count
(`support.CONDITIONAL`); the same settings are accepted where they count; the table's claims about which estimator
or loss reads which key hold for the real functions."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from skyrl_train.algorithms.advantages import AdvantageEstimator, compute_advantages_and_returns
from skyrl_train.algorithms.policy_losses import PolicyLossType
from skyrl_train.config import ConfigError, load_config
from skyrl_train.config.registries import AdvantageEstimatorRegistry, PolicyLossRegistry
from skyrl_train.config.schema import AlgorithmConfig
from skyrl_train.config.support import ADVANTAGE_ESTIMATOR_KEYS, POLICY_LOSS_KEYS

NO_KL = "trainer.algorithm.use_kl_loss=false"
NO_EVAL_DATA = "data.val_data=[]"
CRITIC = "trainer.critic.model.path=/some/critic"

# (setting, the overrides in which it does nothing, the condition the refusal names)
INERT = [
    (
        "trainer.algorithm.dynamic_sampling.max_sample_batches=5",
        [],
        "dynamic sampling on (trainer.algorithm.dynamic_sampling.type=filter or replace)",
    ),
    (
        "trainer.algorithm.dynamic_sampling.min_replace_ratio=0.5",
        ["trainer.algorithm.dynamic_sampling.type=filter"],
        "trainer.algorithm.dynamic_sampling.type=replace",
    ),
    (
        "trainer.algorithm.kl_loss_coef=0.5",
        [NO_KL],
        "a KL term: trainer.algorithm.use_kl_loss=true, or use_kl_in_reward=true (kl_loss_coef is then the KL "
        "controller's initial coefficient)",
    ),
    (
        "trainer.algorithm.kl_estimator_type=k1",
        [NO_KL],
        "a KL term: trainer.algorithm.use_kl_loss=true, or use_kl_in_reward=true (kl_loss_coef is then the KL "
        "controller's initial coefficient)",
    ),
    (
        "trainer.algorithm.kl_ctrl.kl_target=0.2",
        [NO_KL, "trainer.algorithm.use_kl_in_reward=true"],
        "trainer.algorithm.kl_ctrl.type=adaptive",
    ),
    (
        "trainer.algorithm.kl_ctrl.horizon=500",
        [NO_KL, "trainer.algorithm.use_kl_in_reward=true"],
        "trainer.algorithm.kl_ctrl.type=adaptive",
    ),
    ("trainer.algorithm.entropy_loss_coef=0.1", [], "trainer.algorithm.use_entropy_loss=true"),
    (
        "trainer.algorithm.clip_ratio_c=2.0",
        [],
        "trainer.algorithm.policy_loss_type=dual_clip (or a custom one, which is passed it)",
    ),
    (
        "trainer.algorithm.lambd=0.9",
        [],
        "trainer.algorithm.advantage_estimator=gae (or a custom one, which is passed it)",
    ),
    (
        "trainer.algorithm.gamma=0.9",
        [],
        "trainer.algorithm.advantage_estimator=reinforce++ or gae (or a custom one, which is passed it)",
    ),
    (
        "trainer.algorithm.grpo_norm_by_std=false",
        ["trainer.algorithm.advantage_estimator=rloo"],
        "trainer.algorithm.advantage_estimator=grpo (or a custom one, which is passed it)",
    ),
    (
        "trainer.algorithm.max_seq_len=4096",
        [],
        "trainer.algorithm.loss_reduction=seq_mean_token_sum_norm",
    ),
    *(
        (setting, [], "a LoRA adapter (trainer.policy.model.lora.rank > 0)")
        for setting in (
            "trainer.policy.model.lora.alpha=32",
            "trainer.policy.model.lora.dropout=0.1",
            "trainer.policy.model.lora.target_modules=[q_proj]",
            "trainer.policy.model.lora.exclude_modules=[k_proj]",
            "trainer.policy.model.lora.init_method=gaussian",
        )
    ),
    ("trainer.critic.model.lora.alpha=32", [CRITIC], "a LoRA adapter (trainer.critic.model.lora.rank > 0)"),
    (
        "trainer.policy.optimizer_config.num_warmup_steps=5",
        ["trainer.policy.optimizer_config.scheduler=constant"],
        "a scheduler that warms up (trainer.policy.optimizer_config.scheduler not constant)",
    ),
    (
        "trainer.gradient_checkpointing_use_reentrant=true",
        ["trainer.gradient_checkpointing=false"],
        "trainer.gradient_checkpointing=true",
    ),
    ("trainer.resume_path=/ckpts/global_step_3", [], "trainer.resume_mode=from_path"),
    ("generator.http_endpoint_host=0.0.0.0", [], "generator.enable_http_endpoint=true"),
    ("generator.http_endpoint_port=9000", [], "generator.enable_http_endpoint=true"),
    ("generator.served_model_name=policy", [], "generator.enable_http_endpoint=true"),
    ("generator.eval_n_samples_per_prompt=4", [NO_EVAL_DATA], "eval data (data.val_data not empty)"),
    ("trainer.eval_batch_size=8", [NO_EVAL_DATA], "eval data (data.val_data not empty)"),
    ("generator.eval_sampling_params.temperature=0.5", [NO_EVAL_DATA], "eval data (data.val_data not empty)"),
    ("generator.eval_sampling_params.max_generate_length=64", [NO_EVAL_DATA], "eval data (data.val_data not empty)"),
    (
        "generator.append_eos_token_after_stop_str_in_multi_turn=false",
        ["generator.use_conversation_multi_turn=false"],
        "generator.use_conversation_multi_turn=true (a turn ending on a stop string is then its own message)",
    ),
]

# (setting, the overrides in which it counts)
COUNTS = [
    ("trainer.algorithm.dynamic_sampling.max_sample_batches=5", ["trainer.algorithm.dynamic_sampling.type=filter"]),
    ("trainer.algorithm.dynamic_sampling.min_replace_ratio=0.5", ["trainer.algorithm.dynamic_sampling.type=replace"]),
    ("trainer.algorithm.kl_loss_coef=0.5", []),
    ("trainer.algorithm.kl_loss_coef=0.5", [NO_KL, "trainer.algorithm.use_kl_in_reward=true"]),
    ("trainer.algorithm.kl_estimator_type=k1", [NO_KL, "trainer.algorithm.use_kl_in_reward=true"]),
    (
        "trainer.algorithm.kl_ctrl.horizon=500",
        [NO_KL, "trainer.algorithm.use_kl_in_reward=true", "trainer.algorithm.kl_ctrl.type=adaptive"],
    ),
    ("trainer.algorithm.entropy_loss_coef=0.1", ["trainer.algorithm.use_entropy_loss=true"]),
    ("trainer.algorithm.clip_ratio_c=2.0", ["trainer.algorithm.policy_loss_type=dual_clip"]),
    ("trainer.algorithm.lambd=0.9", ["trainer.algorithm.advantage_estimator=gae", CRITIC]),
    ("trainer.algorithm.gamma=0.9", ["trainer.algorithm.advantage_estimator=reinforce++"]),
    ("trainer.algorithm.grpo_norm_by_std=false", []),
    ("trainer.algorithm.max_seq_len=4096", ["trainer.algorithm.loss_reduction=seq_mean_token_sum_norm"]),
    ("trainer.policy.model.lora.alpha=32", ["trainer.policy.model.lora.rank=8"]),
    ("trainer.critic.model.lora.alpha=32", [CRITIC, "trainer.critic.model.lora.rank=8"]),
    ("trainer.policy.optimizer_config.num_warmup_steps=5", []),
    ("trainer.gradient_checkpointing_use_reentrant=true", []),
    ("trainer.resume_path=/ckpts/global_step_3", ["trainer.resume_mode=from_path"]),
    ("generator.http_endpoint_port=9000", ["generator.enable_http_endpoint=true"]),
    ("generator.eval_n_samples_per_prompt=4", []),
    ("+generator.eval_sampling_params.ignore_eos=true", []),
    ("generator.append_eos_token_after_stop_str_in_multi_turn=false", []),
]


def refusals(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as error:
        load_config(list(overrides))
    return error.value.problems


@pytest.mark.parametrize("setting, context, condition", INERT, ids=[case[0] for case in INERT])
def test_an_inert_setting_is_refused_naming_the_key_and_what_makes_it_count(setting, context, condition):
    key = setting.partition("=")[0]
    (problem,) = [p for p in refusals(*context, setting) if p.startswith(f"{key}=")]
    assert problem.endswith(f" has no effect in this config: it applies only with {condition}.")


@pytest.mark.parametrize("setting, context", COUNTS, ids=[f"{s} {' '.join(c)}" for s, c in COUNTS])
def test_the_same_setting_is_accepted_where_it_counts(setting, context):
    load_config([*context, setting])


def test_an_undeclared_eval_sampling_key_without_eval_data_is_refused_by_its_name():
    (problem,) = refusals(NO_EVAL_DATA, "+generator.eval_sampling_params.ignore_eos=true")
    assert problem == (
        "generator.eval_sampling_params.ignore_eos=True has no effect in this config: it applies only with eval data "
        "(data.val_data not empty)."
    )


def test_a_custom_advantage_estimator_may_read_gamma_and_lambd():
    AdvantageEstimatorRegistry.register("inert_test_estimator", lambda **kwargs: None)
    try:
        cfg = load_config(
            [
                "trainer.algorithm.advantage_estimator=inert_test_estimator",
                "trainer.algorithm.gamma=0.9",
                "trainer.algorithm.lambd=0.8",
            ]
        )
    finally:
        AdvantageEstimatorRegistry.unregister("inert_test_estimator")
    assert (cfg.trainer.algorithm.gamma, cfg.trainer.algorithm.lambd) == (0.9, 0.8)


# ------------------------------------------------------------------ the table's claims about the real functions


def test_the_reader_tables_name_exactly_the_built_ins():
    assert set(ADVANTAGE_ESTIMATOR_KEYS) == {e.value for e in AdvantageEstimator}
    assert set(POLICY_LOSS_KEYS) == {p.value for p in PolicyLossType}


ESTIMATOR_INPUTS = dict(
    token_level_rewards=torch.tensor([[0.0, 1.0, 0.5], [0.0, 0.0, 0.0], [1.0, 0.0, 2.0], [0.0, 0.5, 0.0]]),
    response_mask=torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]),
    index=["a", "a", "b", "b"],
    values=torch.tensor([[0.1, 0.2, 0.3], [0.0, 0.4, 0.0], [0.5, 0.1, 0.2], [0.3, 0.0, 0.0]]),
)
KEY_VALUES = {"gamma": (1.0, 0.5), "lambd": (1.0, 0.5), "grpo_norm_by_std": (True, False)}


@pytest.mark.parametrize(
    "estimator, key",
    [(name, key) for name, reads in ADVANTAGE_ESTIMATOR_KEYS.items() for key in KEY_VALUES if key not in reads],
)
def test_an_estimator_gives_the_same_advantages_whatever_a_key_it_does_not_read(estimator, key):
    base = {"gamma": 1.0, "lambd": 1.0, "grpo_norm_by_std": True}
    first, second = (
        compute_advantages_and_returns(estimator, **ESTIMATOR_INPUTS, **{**base, key: value})
        for value in KEY_VALUES[key]
    )
    assert_close(first, second)


@pytest.mark.parametrize(
    "estimator, key",
    [(name, key) for name, reads in ADVANTAGE_ESTIMATOR_KEYS.items() for key in reads],
)
def test_an_estimator_listed_as_reading_a_key_changes_with_it(estimator, key):
    base = {"gamma": 1.0, "lambd": 1.0, "grpo_norm_by_std": True}
    first, second = (
        compute_advantages_and_returns(estimator, **ESTIMATOR_INPUTS, **{**base, key: value})[0]
        for value in KEY_VALUES[key]
    )
    assert not torch.allclose(first, second)


@pytest.mark.parametrize("loss", [name for name, reads in POLICY_LOSS_KEYS.items() if "clip_ratio_c" not in reads])
def test_a_loss_that_does_not_list_clip_ratio_c_ignores_it(loss):
    # Negative advantages and ratios far above 1: where dual clip's cap c * |A| would bind.
    log_probs = torch.tensor([[1.5, 2.0, 0.5]])
    old_log_probs = torch.zeros(1, 3)
    advantages = torch.tensor([[-1.0, -2.0, -1.0]])
    first, second = (
        PolicyLossRegistry.get(loss)(
            log_probs, old_log_probs, advantages, AlgorithmConfig(clip_ratio_c=c, loss_reduction="sequence_mean")
        )[0]
        for c in (1.5, 3.0)
    )
    assert_close(first, second)
