"""The `sft` block and the warm-start keys are checked when the config loads, each problem naming its key."""

from __future__ import annotations

import pytest

from skyrl_train.config import ConfigError, load_config
from skyrl_train.config.validate import FOLDABLE_LORA_INITS, LORA_INIT_METHODS, SFT_TRAIN_ON, SFT_TRUNCATIONS
from skyrl_train.sft.encoding import TrainOn, Truncation

DATA = "sft.train_data=[demos.jsonl]"


def problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as error:
        load_config(list(overrides))
    return error.value.problems


def test_the_names_are_the_sft_modules():
    assert set(SFT_TRUNCATIONS) == {t.value for t in Truncation}
    assert set(SFT_TRAIN_ON) == {t.value for t in TrainOn}
    assert set(FOLDABLE_LORA_INITS) <= set(LORA_INIT_METHODS)


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("sft.truncation=cut", "sft.truncation must be one of 'error', 'truncate', got 'cut'."),
        (
            "sft.train_on_what=all",
            "sft.train_on_what must be one of 'all_assistant_messages', 'last_assistant_message', got 'all'.",
        ),
        ("sft.batch_size=0", "sft.batch_size must be >= 1, got 0."),
        ("sft.num_steps=0", "sft.num_steps must be >= 1, got 0."),
        ("sft.lr=0.0", "sft.lr must be > 0 (or null for trainer.policy.optimizer_config.lr), got 0.0."),
    ],
)
def test_a_bad_sft_value_is_refused_naming_the_key(setting, problem):
    assert problems(DATA, setting) == [problem]


def test_the_batch_must_split_evenly_over_the_policys_ranks():
    found = problems(
        DATA,
        "sft.batch_size=3",
        "trainer.strategy=fsdp2",
        "trainer.placement.policy_num_gpus_per_node=2",
        "trainer.algorithm.use_kl_loss=false",
    )
    assert any(
        p.startswith("sft.batch_size=3 must be a multiple of the policy's 2 data-parallel workers") for p in found
    )


def test_a_warm_start_refuses_a_single_growing_assistant_message():
    found = problems("trainer.warm_start=true", DATA, "generator.use_conversation_multi_turn=false")
    assert any(p.startswith("trainer.warm_start=true trains on conversations tokenised as multi-turn") for p in found)


def test_a_folded_warm_start_needs_a_lora_init_that_can_draw_a_fresh_adapter():
    found = problems(
        "trainer.warm_start=true",
        DATA,
        "trainer.policy.model.lora.rank=4",
        "trainer.policy.model.lora.init_method=olora",
    )
    assert any(
        p.startswith("trainer.policy.model.lora.init_method='olora' cannot draw the fresh adapter") for p in found
    )
    load_config(
        [
            "trainer.warm_start=true",
            DATA,
            "trainer.policy.model.lora.rank=4",
            "trainer.policy.model.lora.init_method=olora",
            "trainer.warm_start_reference=base",
        ]
    )
