"""validate_cfg: each rule (skyrl_upstream_contract.md §2.3.7 plus this fork's) names the key(s) it is about."""

import pytest

from skyrl_train.config import ConfigError, load_config, validate_cfg
from skyrl_train.config.support import not_implemented_problems


def problems_of(*overrides: str) -> list[str]:
    cfg = load_config(list(overrides), validate=False)
    with pytest.raises(ConfigError) as e:
        validate_cfg(cfg)
    return e.value.problems


def rule_problems(*overrides: str) -> list[str]:
    """The problems besides the refusals of `support.py` (keys not implemented, or not read by this strategy)."""
    refusals = set(not_implemented_problems(load_config(list(overrides), validate=False)))
    return [p for p in problems_of(*overrides) if p not in refusals]


def only_problem(*overrides: str) -> str:
    problems = problems_of(*overrides)
    assert len(problems) == 1, problems
    return problems[0]


def test_defaults_are_valid():
    validate_cfg(load_config([], validate=False))


SEQ_MEAN_TOKEN_SUM_NORM = "trainer.algorithm.loss_reduction=seq_mean_token_sum_norm"


def test_max_seq_len_is_derived_from_input_and_generate_lengths():
    cfg = load_config(["generator.max_turns=3", "generator.max_input_length=2048", SEQ_MEAN_TOKEN_SUM_NORM])
    assert cfg.trainer.algorithm.max_seq_len == 2048 + 1024


def test_max_seq_len_stays_null_for_the_reductions_that_do_not_read_it():
    assert load_config([]).trainer.algorithm.max_seq_len is None


def test_explicit_max_seq_len_is_kept():
    cfg = load_config(["trainer.algorithm.max_seq_len=100", SEQ_MEAN_TOKEN_SUM_NORM])
    assert cfg.trainer.algorithm.max_seq_len == 100


def test_a_derived_max_seq_len_passes_validation_again():
    cfg = load_config([SEQ_MEAN_TOKEN_SUM_NORM])
    validate_cfg(cfg)
    assert cfg.trainer.algorithm.max_seq_len == 512 + 1024


def test_null_resume_mode_means_none():
    assert load_config(["trainer.resume_mode=null"]).trainer.resume_mode == "none"


# ----------------------------------------------------------------------------------------- batch sizes


def test_train_batch_must_be_a_multiple_of_the_mini_batch():
    assert only_problem("trainer.train_batch_size=3", "trainer.policy_mini_batch_size=2") == (
        "trainer.train_batch_size (3) must be a multiple of trainer.policy_mini_batch_size (2)."
    )


def test_train_batch_must_be_at_least_the_mini_batch():
    assert "trainer.train_batch_size (4) must be >= trainer.policy_mini_batch_size (8)" in only_problem(
        "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=8"
    )


def test_mini_batch_per_worker_must_be_a_multiple_of_the_micro_batch():
    # single strategy: dp = 1, so the per-worker mini batch is 2 prompts x 5 samples = 10 sequences.
    problem = only_problem(
        "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=2", "trainer.micro_train_batch_size_per_gpu=4"
    )
    assert "= 10" in problem and "trainer.micro_train_batch_size_per_gpu (4)" in problem


def test_fsdp2_dp_is_nodes_times_gpus_per_node():
    # dp = 2 x 4 = 8 workers; 1 prompt x 5 samples = 5 sequences cannot give every worker one.
    problems = rule_problems(
        "trainer.strategy=fsdp2",
        "trainer.placement.policy_num_nodes=2",
        "trainer.placement.policy_num_gpus_per_node=4",
        "trainer.placement.colocate_all=false",
        "trainer.placement.colocate_policy_ref=false",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=1",
    )
    assert problems == [
        "trainer.policy_mini_batch_size x generator.n_samples_per_prompt (1 x 5) must be at least the policy "
        "data-parallel size (8)."
    ]


def test_critic_batch_sizes_are_checked_when_a_critic_exists():
    problem = only_problem("trainer.critic.model.path=/c", "trainer.critic_mini_batch_size=1000")
    assert "trainer.critic_mini_batch_size (1000)" in problem


def test_single_strategy_runs_one_policy_worker():
    problems = rule_problems("trainer.placement.policy_num_gpus_per_node=2")
    assert any("trainer.strategy='single'" in p and "policy_num_gpus_per_node" in p for p in problems)


# ------------------------------------------------------------------------------------------ generator


def test_single_turn_input_length_must_equal_prompt_length():
    assert only_problem("generator.max_input_length=1024").startswith(
        "generator.max_input_length (1024) must equal trainer.max_prompt_length (512)"
    )


def test_multi_turn_input_length_must_be_at_least_prompt_length():
    assert only_problem("generator.max_turns=4", "generator.max_input_length=256").startswith(
        "generator.max_input_length (256) must be >= trainer.max_prompt_length (512)"
    )


def test_remote_engine_count_must_match_urls():
    (problem,) = rule_problems("generator.run_engines_locally=false", "generator.num_inference_engines=2")
    assert "generator.num_inference_engines (2)" in problem and "remote_inference_engine_urls (1)" in problem


def test_remote_engines_may_return_logprobs():
    cfg = load_config(["generator.run_engines_locally=false", "generator.sampling_params.logprobs=0"])
    assert cfg.generator.sampling_params.logprobs == 0


def test_a_remote_url_must_name_a_port():
    (problem,) = rule_problems("generator.run_engines_locally=false", "generator.remote_inference_engine_urls=[myhost]")
    assert problem == "generator.remote_inference_engine_urls: 'myhost' is not host:port (or http(s)://host:port)."


def test_keys_of_local_engines_are_refused_with_remote_engines():
    (problem,) = problems_of("generator.run_engines_locally=false", "generator.max_num_seqs=8")
    assert problem.startswith("generator.max_num_seqs=8 has no effect in this config: it applies only with engines")


def test_weight_sync_keys_are_refused_with_the_local_hf_engine():
    (problem,) = problems_of("generator.weight_sync_backend=gloo")
    assert problem.startswith("generator.weight_sync_backend='gloo' has no effect in this config")


def test_logprobs_above_zero_are_rejected_when_the_block_is_built():
    with pytest.raises(ConfigError) as e:
        load_config(["generator.sampling_params.logprobs=5"], validate=False)
    assert e.value.problems == [
        "generator.sampling_params: invalid sampling params: logprobs must be 0 (sampled-token logprob) or None, got 5"
    ]


def test_batched_mode_is_single_turn():
    assert only_problem("generator.batched=true", "generator.max_turns=2") == (
        "generator.batched=true gives one reward per single-turn response: it needs generator.max_turns=1, got 2."
    )
    assert only_problem("generator.batched=true", "generator.step_wise_trajectories=true").startswith(
        "generator.batched=true (one reward per response) and generator.step_wise_trajectories=true"
    )


def test_vllm_sync_engine_needs_batched():
    (problem,) = rule_problems("generator.backend=vllm", "generator.async_engine=false")
    assert "generator.batched=true" in problem


def test_sglang_and_megatron_are_not_supported_in_this_fork():
    problems = rule_problems("generator.backend=sglang", "trainer.strategy=megatron")
    assert "trainer.strategy='megatron' is not supported in this fork" in problems[0]
    assert "generator.backend='sglang' is not supported in this fork" in problems[1]


def test_colocate_all_needs_as_many_engines_as_policy_workers():
    local_hf, colocation = rule_problems("generator.num_inference_engines=2")
    assert local_hf.startswith("generator.num_inference_engines=2 with the local hf engine")
    assert "trainer.placement.colocate_all=true" in colocation


def test_negative_trajectory_timeout_is_rejected():
    assert only_problem("generator.trajectory_timeout_seconds=-1").startswith("generator.trajectory_timeout_seconds")


def test_unknown_logger_backend_is_rejected():
    assert only_problem("trainer.logger=[console,neptune]").startswith("trainer.logger: unknown backend 'neptune'")


# ------------------------------------------------------------------------------------------ algorithm


def test_gae_needs_a_critic_path():
    assert "trainer.critic.model.path" in only_problem("trainer.algorithm.advantage_estimator=gae")


def test_kl_in_reward_and_kl_loss_are_exclusive():
    problem = only_problem("trainer.algorithm.use_kl_in_reward=true")
    assert "trainer.algorithm.use_kl_in_reward" in problem and "trainer.algorithm.use_kl_loss" in problem


def test_loss_reduction_must_be_one_of_three():
    assert only_problem("trainer.algorithm.loss_reduction=sum") == (
        "trainer.algorithm.loss_reduction must be one of 'token_mean', 'sequence_mean', "
        "'seq_mean_token_sum_norm', got 'sum'."
    )


def test_policy_loss_and_estimator_must_be_registered():
    problems = problems_of("trainer.algorithm.policy_loss_type=nope", "trainer.algorithm.advantage_estimator=nada")
    assert problems[0].startswith("trainer.algorithm.advantage_estimator='nada' is not registered; available:")
    assert problems[1].startswith("trainer.algorithm.policy_loss_type='nope' is not registered; available:")


_OPC = "trainer.algorithm.off_policy_correction"


@pytest.mark.parametrize(
    "rule",
    ["tis_ratio_type=token", "sequence_mask_metric=product", "outlier_token_is_threshold_low=0.1"],
    ids=["tis", "mask", "outlier"],
)
def test_off_policy_correction_needs_rollout_logprobs(rule):
    assert only_problem(f"{_OPC}.{rule}", "generator.sampling_params.logprobs=null") == (
        f"{_OPC} corrects the loss with the inference engine's logprobs of the sampled tokens, but "
        "generator.sampling_params.logprobs=null asks the engine for none: set it to 0."
    )


def test_deprecated_use_tis_is_token_tis_with_its_cap_and_a_warning():
    with pytest.warns(FutureWarning, match="trainer.algorithm.use_tis is deprecated"):
        cfg = load_config(["trainer.algorithm.use_tis=true", "trainer.algorithm.tis_imp_ratio_cap=1.5"])
    opc = cfg.trainer.algorithm.off_policy_correction
    assert (opc.tis_ratio_type, opc.token_tis_ratio_clip_high) == ("token", 1.5)
    with pytest.warns(FutureWarning):
        validate_cfg(cfg)  # validating again keeps the mapping
    assert (opc.tis_ratio_type, opc.token_tis_ratio_clip_high) == ("token", 1.5)


def test_deprecated_use_tis_needs_a_positive_cap_and_no_other_tis_type():
    assert only_problem("trainer.algorithm.use_tis=true").startswith(
        "trainer.algorithm.use_tis=true (deprecated) takes its cap from trainer.algorithm.tis_imp_ratio_cap, which "
        "must be > 0, got -1.0."
    )
    assert only_problem(
        "trainer.algorithm.use_tis=true", "trainer.algorithm.tis_imp_ratio_cap=2", f"{_OPC}.tis_ratio_type=sequence"
    ) == (
        "trainer.algorithm.use_tis=true (deprecated) means token TIS, but "
        f"{_OPC}.tis_ratio_type='sequence': set only the latter."
    )


@pytest.mark.parametrize(
    ("key", "condition"),
    [
        ("trainer.algorithm.tis_imp_ratio_cap=2.0", "trainer.algorithm.use_tis=true"),
        (f"{_OPC}.token_tis_ratio_clip_high=3.0", f"{_OPC}.tis_ratio_type=token"),
        (f"{_OPC}.sequence_tis_ratio_clip_high=3.0", f"{_OPC}.tis_ratio_type=sequence"),
        (f"{_OPC}.geo_mask_high=1.1", f"{_OPC}.sequence_mask_metric=geometric"),
        (f"{_OPC}.product_mask_low=0.1", f"{_OPC}.sequence_mask_metric=product"),
    ],
)
def test_a_cap_or_bound_of_a_rule_that_is_off_is_refused(key, condition):
    assert only_problem(key) == f"{key} has no effect in this config: it applies only with {condition}."


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["tis_ratio_type=sequence", "sequence_tis_ratio_clip_high=0"],
            f"{_OPC}.sequence_tis_ratio_clip_high must be > 0, got 0.0.",
        ),
        (
            ["sequence_mask_metric=geometric", "geo_mask_low=1.2", "geo_mask_high=1.1"],
            f"{_OPC}.geo_mask_low=1.2 is above {_OPC}.geo_mask_high=1.1: every row would be masked.",
        ),
        (
            ["outlier_token_is_threshold_low=3", "outlier_token_is_threshold_high=2"],
            f"{_OPC}.outlier_token_is_threshold_low=3.0 is above outlier_token_is_threshold_high=2.0: every row "
            "would be masked.",
        ),
        (
            ["outlier_token_is_threshold_high=0"],
            f"{_OPC}.outlier_token_is_threshold_high must be > 0 (ratios are positive), got 0.0.",
        ),
    ],
    ids=["sequence-cap", "geo-bounds", "outlier-bounds", "outlier-high"],
)
def test_caps_and_bounds_that_would_discard_everything_are_errors(overrides, expected):
    assert only_problem(*(f"{_OPC}.{o}" for o in overrides)) == expected


# -------------------------------------------------------------------------------------------- trainer


def test_max_ckpts_to_keep_zero_is_an_error():
    assert only_problem("trainer.max_ckpts_to_keep=0").startswith("trainer.max_ckpts_to_keep")


@pytest.mark.parametrize("key", ["eval_interval", "ckpt_interval", "hf_save_interval"])
def test_intervals_are_positive_or_minus_one(key):
    assert only_problem(f"trainer.{key}=0").startswith(f"trainer.{key} must be a positive number of steps or -1")


def test_resume_mode_must_be_known():
    assert only_problem("trainer.resume_mode=earliest").startswith("trainer.resume_mode must be one of")


def test_resume_from_path_needs_a_path():
    assert "trainer.resume_path" in only_problem("trainer.resume_mode=from_path")


def test_push_to_hub_needs_a_repo():
    assert only_problem("trainer.push_to_hub=true") == (
        "trainer.push_to_hub=true requires trainer.hub_model_id (the Hub repo, e.g. 'user/name')."
    )


@pytest.mark.parametrize("ratio", [-0.1, 1.5])
def test_max_infra_failure_ratio_is_a_fraction(ratio):
    assert only_problem(f"trainer.max_infra_failure_ratio={ratio}") == (
        f"trainer.max_infra_failure_ratio must be in [0, 1], got {ratio}."
    )


def test_s3_upload_settings_are_checked():
    problems = problems_of("trainer.s3.upload_attempts=0", "trainer.s3.flush_timeout_seconds=-1")
    assert problems == [
        "trainer.s3.upload_attempts must be >= 1, got 0.",
        "trainer.s3.flush_timeout_seconds must be >= 0, got -1.0.",
    ]


def test_s3_keep_remote_zero_is_an_error():
    assert only_problem("trainer.s3.bucket=b", "trainer.s3.keep_remote=0").startswith("trainer.s3.keep_remote")


def test_all_rule_violations_are_reported_together():
    problems = problems_of(
        "trainer.max_ckpts_to_keep=0",
        "trainer.algorithm.loss_reduction=sum",
        "trainer.train_batch_size=3",
        "trainer.policy_mini_batch_size=2",
    )
    assert len(problems) == 3
    assert {p.split(" ")[0] for p in problems} == {
        "trainer.max_ckpts_to_keep",
        "trainer.algorithm.loss_reduction",
        "trainer.train_batch_size",
    }


def test_step_wise_training_refuses_gae():
    problem = only_problem(
        "generator.step_wise_trajectories=true",
        "trainer.algorithm.advantage_estimator=gae",
        "trainer.critic.model.path=/some/critic",
    )
    assert problem.startswith("generator.step_wise_trajectories=true") and "'gae'" in problem


def test_step_wise_training_needs_each_turn_as_its_own_message():
    assert only_problem("generator.step_wise_trajectories=true", "generator.use_conversation_multi_turn=false") == (
        "generator.step_wise_trajectories=true requires generator.use_conversation_multi_turn=true: each turn is "
        "trained as its own sample, so it must be its own chat message."
    )


def test_dynamic_sampling_bounds():
    assert only_problem(
        "trainer.algorithm.dynamic_sampling.type=filter", "trainer.algorithm.dynamic_sampling.max_sample_batches=0"
    ) == ("trainer.algorithm.dynamic_sampling.max_sample_batches must be >= 1, got 0.")
    assert only_problem(
        "trainer.algorithm.dynamic_sampling.type=replace", "trainer.algorithm.dynamic_sampling.min_replace_ratio=1.5"
    ) == ("trainer.algorithm.dynamic_sampling.min_replace_ratio must be in [0, 1], got 1.5.")


def test_fsdp2_rows_must_split_evenly_over_the_workers():
    problem = only_problem(
        "trainer.strategy=fsdp2",
        "trainer.placement.colocate_all=false",
        "trainer.placement.policy_num_gpus_per_node=2",
        "trainer.placement.ref_num_gpus_per_node=2",
        "generator.n_samples_per_prompt=3",
        "trainer.train_batch_size=1",
        "trainer.policy_mini_batch_size=1",
    )
    assert problem.startswith("trainer.policy_mini_batch_size x generator.n_samples_per_prompt (1 x 3)")


def test_step_wise_is_refused_with_fsdp2():
    problem = only_problem(
        "trainer.strategy=fsdp2",
        "trainer.placement.colocate_all=false",
        "trainer.placement.policy_num_gpus_per_node=2",
        "trainer.placement.ref_num_gpus_per_node=2",
        "generator.step_wise_trajectories=true",
    )
    assert problem.startswith("generator.step_wise_trajectories=true is not supported with trainer.strategy=fsdp2")
