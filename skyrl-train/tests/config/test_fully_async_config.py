"""`trainer.fully_async`: where asynchronous training cannot work it is refused with the reason, and an asynchronous
run corrects its stale rows with token TIS unless told otherwise."""

from __future__ import annotations

import pytest

from skyrl_train.config import ConfigError, load_config

REMOTE = [
    "generator.run_engines_locally=false",
    "generator.remote_inference_engine_urls=[127.0.0.1:8101]",
    "generator.weight_sync_backend=gloo",
]
K1 = "trainer.fully_async.max_staleness_steps=1"


def only_problem(*overrides: str) -> str:
    with pytest.raises(ConfigError) as error:
        load_config(list(overrides))
    assert len(error.value.problems) == 1, error.value.problems
    return error.value.problems[0]


def test_the_default_is_the_synchronous_loop_with_no_correction():
    cfg = load_config([])
    assert cfg.trainer.fully_async.max_staleness_steps == 0
    assert cfg.trainer.algorithm.off_policy_correction.tis_ratio_type is None


def test_asynchronous_runs_get_token_tis_unless_told_not_to():
    corrected = load_config([*REMOTE, K1]).trainer.algorithm.off_policy_correction
    assert (corrected.tis_ratio_type, corrected.token_tis_ratio_clip_high) == ("token", 2.0)

    uncorrected = load_config([*REMOTE, K1, "trainer.fully_async.default_correction=false"])
    assert uncorrected.trainer.algorithm.off_policy_correction.enabled() is False

    own_rule = load_config([*REMOTE, K1, "trainer.algorithm.off_policy_correction.sequence_mask_metric=geometric"])
    opc = own_rule.trainer.algorithm.off_policy_correction
    assert (opc.tis_ratio_type, opc.sequence_mask_metric) == (None, "geometric")  # the user's rule, alone


def test_the_default_correction_cap_may_be_set_when_asynchronous():
    cfg = load_config([*REMOTE, K1, "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high=3.0"])
    assert cfg.trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high == 3.0


def test_the_local_hf_engine_is_refused_because_it_shares_the_trained_module():
    problem = only_problem(K1)
    assert problem.startswith("trainer.fully_async.max_staleness_steps=1 needs engines that generate while the policy")
    assert "the local hf engine generates with the policy's own module in this process" in problem
    assert "generator.run_engines_locally=false" in problem


def test_colocated_vllm_engines_are_refused_because_they_sleep_while_training():
    problem = only_problem(K1, "generator.backend=vllm", "trainer.placement.colocate_all=true")
    assert "colocated vLLM engines (trainer.placement.colocate_all=true) sleep while it trains" in problem


def test_local_vllm_engines_are_refused_because_they_take_updates_mid_request():
    problem = only_problem(K1, "generator.backend=vllm", "trainer.placement.colocate_all=false")
    assert "a local vLLM engine would apply the update between the tokens of the requests" in problem


def test_dynamic_sampling_and_the_http_endpoint_are_refused_with_their_reasons():
    assert "draws whole prompt batches per step" in only_problem(
        *REMOTE, K1, "trainer.algorithm.dynamic_sampling.type=filter"
    )
    assert "serves the policy only during the trainer's generation phases" in only_problem(
        *REMOTE, K1, "generator.enable_http_endpoint=true"
    )


def test_negative_staleness_and_no_workers_are_refused():
    assert only_problem("trainer.fully_async.max_staleness_steps=-1") == (
        "trainer.fully_async.max_staleness_steps must be >= 0, got -1."
    )
    assert only_problem(*REMOTE, K1, "trainer.fully_async.num_parallel_generation_workers=0") == (
        "trainer.fully_async.num_parallel_generation_workers must be >= 1, got 0."
    )


def test_the_asynchronous_keys_are_refused_in_the_synchronous_loop():
    problem = only_problem("trainer.fully_async.num_parallel_generation_workers=8")
    assert "trainer.fully_async.num_parallel_generation_workers" in problem
    assert "asynchronous training (trainer.fully_async.max_staleness_steps > 0)" in problem
