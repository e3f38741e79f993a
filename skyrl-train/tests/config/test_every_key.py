"""Every config key either shows its effect in a test or is refused when set: no key is silently ignored.

`ROWS` has one row per key of the schema (and one per open block):
- `Refused(value)`: setting the key to `value` (a non-default, in override syntax) makes `load_config` raise a
  `ConfigError` naming the key and saying it is not implemented. These are exactly the keys of
  `skyrl_train/config/support.py`'s `NOT_IMPLEMENTED` table.
- `ShownBy("skyrl-train/tests/...py::test_name")`: that test sets the key (or its typed section's field) and
  checks what it changes; this test checks the file exists and defines the function.
- `Open(...)` for a block with free-form keys: how its undeclared keys are covered.

Implementing a refused key: delete its entry in `support.NOT_IMPLEMENTED` and change its row here to
`ShownBy(<the test showing its effect>)`.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import NamedTuple

import pytest

from skyrl_train.config import ConfigError, SkyRLConfig, load_config
from skyrl_train.config.schema import extra_keys_field
from skyrl_train.config.support import NOT_IMPLEMENTED

REPO_ROOT = Path(__file__).resolve().parents[3]
OPEN_KEY = "<any other key>"


class Refused(NamedTuple):
    value: str


class ShownBy(NamedTuple):
    test: str


class Open(NamedTuple):
    rule: str
    shown_by: str
    refused_key: str | None = None


_TINY_RUN = "skyrl-train/tests/config/test_key_effects.py::test_a_two_step_run_follows_the_loop_batch_eval_dump_and_checkpoint_keys"
_PHASES = (
    "skyrl-train/tests/trainer/test_generation_phases.py::"
    "test_the_engine_sleeps_through_every_policy_update_and_its_prefix_cache_is_empty_after"
)
_WORKERS = "skyrl-train/tests/config/test_key_effects.py::test_paths_bf16_and_checkpointing_decide_the_workers"
_LORA = "skyrl-train/tests/config/test_key_effects.py::test_lora_settings_shape_the_adapter"
_OPTIMIZER = "skyrl-train/tests/config/test_key_effects.py::test_optimizer_settings_reach_adamw_and_the_warmup_schedule"
_MODEL_KWARGS = (
    "skyrl-train/tests/config/test_key_effects.py::test_model_config_kwargs_are_set_on_the_loaded_model_config"
)
_ENGINE = "skyrl-train/tests/config/test_key_effects.py::test_prefix_caching_and_max_num_seqs_configure_the_engine"
_ENDPOINT = "skyrl-train/tests/serve/test_policy_endpoint.py::test_training_serves_the_live_policy_while_generating"
_REMOTE_KEYS = "skyrl-train/tests/config/test_remote_engine_keys.py::"
_REMOTE_ENGINES = _REMOTE_KEYS + "test_remote_urls_model_name_and_parallel_sizes_build_one_remote_engine_per_server"
_WEIGHT_SYNC_KEYS = _REMOTE_KEYS + "test_the_weight_sync_follows_the_backend_override_and_lora_keys"
_SAMPLING = "skyrl-train/tests/inference_engines/hf/test_sampling.py::"
_ROTATION = "skyrl-train/tests/storage/test_checkpoint_rotation.py::"
_ENGINE_GEN = "skyrl-train/tests/inference_engines/hf/test_hf_engine_generation.py::"
_POLICY = "skyrl-train/tests/workers/test_policy_worker.py::"
_LAYOUT = "skyrl-train/tests/generators/test_token_layout.py::"
_S3 = "skyrl-train/tests/storage/test_settings.py::"
# fsdp2 (Ray): placement on two simulated nodes, sharding on two processes, the killed-and-resumed run
_PLACED = "skyrl-train/tests/distributed/test_placement_cluster.py::"
_COLOCATE_ALL = _PLACED + "test_colocate_all_over_two_nodes_shares_each_gpu_between_the_ranks_of_every_role"
_POLICY_REF = "test_colocate_policy_ref_shares_gpus_three_to_one_and_the_critic_takes_the_other_node"
_SPLIT = "test_split_layout_packs_each_role_onto_whole_gpus"
_SHARDING = (
    "skyrl-train/tests/distributed/test_shard_model.py::test_fsdp_size_and_reshard_after_forward_decide_the_layout"
)
# vLLM: the engine-argument translation (CPU suite) and the real engines (`vllm` marker, the vLLM venv)
_VLLM_CFG = "skyrl-train/tests/inference_engines/vllm/test_engine_config.py::"
_ENGINE_ARGS = _VLLM_CFG + "test_generator_keys_map_onto_engine_arguments"
_VLLM = "skyrl-train/tests/inference_engines/vllm/test_vllm_engine.py::"
_OPC = "skyrl-train/tests/algorithms/test_off_policy.py::"
_OPC_GEO = _OPC + "test_the_geometric_mask_drops_rows_whose_mean_log_ratio_is_out_of_bounds"
_OPC_PRODUCT = _OPC + "test_the_product_mask_drops_rows_whose_ratio_product_is_out_of_bounds"
_OPC_OUTLIER = _OPC + "test_the_outlier_mask_drops_rows_with_any_loss_token_out_of_bounds"
_USE_TIS = (
    "skyrl-train/tests/config/test_validation.py::test_deprecated_use_tis_is_token_tis_with_its_cap_and_a_warning"
)
_KILL_RESUME = (
    "skyrl-train/tests/trainer/test_kill_and_resume.py::"
    "test_killed_runs_resume_from_the_last_complete_checkpoint_at_the_same_data_position"
)


def _sampling_rows(block: str) -> dict[str, ShownBy]:
    """The same engine code reads both sampling blocks; the eval block reaching eval generation is shown by the run."""
    effects = {
        "max_generate_length": _ENGINE_GEN + "test_max_generate_length_ends_with_reason_length",
        "repetition_penalty": _SAMPLING
        + "test_repetition_penalty_divides_positive_and_multiplies_negative_logits_of_seen_tokens",
        "temperature": _SAMPLING + "test_temperature_two_takes_the_square_root_of_probabilities",
        "top_p": _SAMPLING + "test_top_p_keeps_tokens_while_the_mass_before_them_is_below_p",
        "min_p": _SAMPLING + "test_min_p_drops_tokens_below_a_fraction_of_the_most_likely",
        "top_k": _SAMPLING + "test_top_k_two_keeps_the_two_most_likely_tokens",
        "logprobs": _LAYOUT + "test_rollout_logprobs_are_none_when_not_requested",
        "stop": _ENGINE_GEN + "test_stop_string_ends_generation_and_is_included_in_the_text",
        "seed": _ENGINE_GEN + "test_seeded_sampling_is_reproducible_whatever_else_is_in_the_batch",
    }
    if block == "eval_sampling_params":
        return {f"generator.{block}.{name}": ShownBy(_TINY_RUN) for name in effects}
    return {f"generator.{block}.{name}": ShownBy(test) for name, test in effects.items()}


ROWS: dict[str, Refused | ShownBy | Open] = {
    # ------------------------------------------------------------------------------------------------ data
    "data.train_data": ShownBy(_TINY_RUN),
    "data.val_data": ShownBy(_TINY_RUN),
    "data.balance_by": ShownBy(
        "skyrl-train/tests/config/test_key_effects.py::"
        "test_balance_by_gives_every_training_batch_one_prompt_of_each_data_source"
    ),
    # --------------------------------------------------------------------------------------------- trainer
    "trainer.policy.model.path": ShownBy(_WORKERS),
    "trainer.policy.model.lora.rank": ShownBy(
        "skyrl-train/tests/workers/test_lora_and_ref.py::test_lora_trains_only_adapter_weights"
    ),
    "trainer.policy.model.lora.alpha": ShownBy(_LORA),
    "trainer.policy.model.lora.dropout": ShownBy(_LORA),
    "trainer.policy.model.lora.target_modules": ShownBy(_LORA),
    "trainer.policy.model.lora.exclude_modules": ShownBy(_LORA),
    "trainer.policy.model.lora.init_method": ShownBy(_LORA),
    "trainer.policy.optimizer_config.lr": ShownBy(_OPTIMIZER),
    "trainer.policy.optimizer_config.adam_betas": ShownBy(_OPTIMIZER),
    "trainer.policy.optimizer_config.weight_decay": ShownBy(_OPTIMIZER),
    "trainer.policy.optimizer_config.max_grad_norm": ShownBy(_OPTIMIZER),
    "trainer.policy.optimizer_config.num_warmup_steps": ShownBy(_OPTIMIZER),
    "trainer.policy.optimizer_config.scheduler": ShownBy(_OPTIMIZER),
    "trainer.policy.model_config_kwargs": ShownBy(_MODEL_KWARGS),
    "trainer.ref.model.path": ShownBy(_WORKERS),
    "trainer.ref.model_config_kwargs": ShownBy(_MODEL_KWARGS),
    "trainer.critic.model.path": ShownBy(_WORKERS),
    "trainer.critic.model.lora.rank": ShownBy(
        "skyrl-train/tests/workers/test_critic_worker.py::test_lora_critic_trains_the_adapter_and_the_value_head_only"
    ),
    "trainer.critic.model.lora.alpha": ShownBy(_LORA),
    "trainer.critic.model.lora.dropout": ShownBy(_LORA),
    "trainer.critic.model.lora.target_modules": ShownBy(_LORA),
    "trainer.critic.model.lora.exclude_modules": ShownBy(_LORA),
    "trainer.critic.model.lora.init_method": ShownBy(_LORA),
    "trainer.critic.optimizer_config.lr": ShownBy(_OPTIMIZER),
    "trainer.critic.optimizer_config.adam_betas": ShownBy(_OPTIMIZER),
    "trainer.critic.optimizer_config.weight_decay": ShownBy(_OPTIMIZER),
    "trainer.critic.optimizer_config.max_grad_norm": ShownBy(_OPTIMIZER),
    "trainer.critic.optimizer_config.num_warmup_steps": ShownBy(_OPTIMIZER),
    "trainer.critic.optimizer_config.scheduler": ShownBy(_OPTIMIZER),
    "trainer.critic.model_config_kwargs": ShownBy(_MODEL_KWARGS),
    "trainer.algorithm.advantage_estimator": ShownBy(
        "skyrl-train/tests/algorithms/test_registry.py::test_custom_estimator_is_used_by_name"
    ),
    "trainer.algorithm.kl_ctrl.type": ShownBy(
        "skyrl-train/tests/algorithms/test_kl.py::test_get_kl_controller_reads_the_algorithm_config"
    ),
    "trainer.algorithm.kl_ctrl.kl_target": ShownBy(
        "skyrl-train/tests/algorithms/test_kl.py::test_get_kl_controller_reads_the_algorithm_config"
    ),
    "trainer.algorithm.kl_ctrl.horizon": ShownBy(
        "skyrl-train/tests/algorithms/test_kl.py::test_get_kl_controller_reads_the_algorithm_config"
    ),
    "trainer.algorithm.kl_estimator_type": ShownBy(_POLICY + "test_kl_loss_term_matches_k3_by_hand"),
    "trainer.algorithm.use_kl_in_reward": ShownBy(_TINY_RUN),
    "trainer.algorithm.use_kl_loss": ShownBy(_POLICY + "test_kl_loss_term_matches_k3_by_hand"),
    "trainer.algorithm.kl_loss_coef": ShownBy(_POLICY + "test_kl_loss_term_matches_k3_by_hand"),
    "trainer.algorithm.use_entropy_loss": ShownBy(_POLICY + "test_entropy_bonus_lowers_the_loss_by_coef_times_entropy"),
    "trainer.algorithm.entropy_loss_coef": ShownBy(
        _POLICY + "test_entropy_bonus_lowers_the_loss_by_coef_times_entropy"
    ),
    "trainer.algorithm.advantage_batch_normalize": ShownBy(
        "skyrl-train/tests/algorithms/test_advantages.py::test_advantage_batch_normalize_hand_computed"
    ),
    "trainer.algorithm.value_head_prefix": ShownBy(
        "skyrl-train/tests/workers/test_critic_worker.py::test_value_head_is_named_by_value_head_prefix"
    ),
    "trainer.algorithm.policy_loss_type": ShownBy(
        _POLICY + "test_a_custom_registered_policy_loss_receives_the_algorithm_config"
    ),
    "trainer.algorithm.loss_reduction": ShownBy(
        "skyrl-train/tests/algorithms/test_reductions.py::test_seq_mean_token_sum_norm_divides_token_sums_by_max_seq_len"
    ),
    "trainer.algorithm.grpo_norm_by_std": ShownBy(
        "skyrl-train/tests/algorithms/test_advantages.py::test_grpo_without_std_normalisation_subtracts_group_mean_only"
    ),
    "trainer.algorithm.zero_variance_filter": ShownBy(_TINY_RUN),
    "trainer.algorithm.lambd": ShownBy(
        "skyrl-train/tests/algorithms/test_advantages.py::test_gae_returns_are_advantages_plus_values_before_whitening"
    ),
    "trainer.algorithm.gamma": ShownBy(
        "skyrl-train/tests/algorithms/test_advantages.py::test_reinforce_plus_plus_discounts_and_whitens_over_the_batch"
    ),
    "trainer.algorithm.eps_clip_low": ShownBy(
        "skyrl-train/tests/algorithms/test_policy_losses.py::test_regular_loss_clips_with_asymmetric_eps"
    ),
    "trainer.algorithm.eps_clip_high": ShownBy(
        "skyrl-train/tests/algorithms/test_policy_losses.py::test_regular_loss_clips_with_asymmetric_eps"
    ),
    "trainer.algorithm.clip_ratio_c": ShownBy(
        "skyrl-train/tests/algorithms/test_policy_losses.py::"
        "test_dual_clip_caps_the_loss_of_negative_advantages_at_c_times_abs_advantage"
    ),
    "trainer.algorithm.value_clip": ShownBy(
        "skyrl-train/tests/algorithms/test_critic_entropy_filter.py::"
        "test_value_loss_takes_the_larger_of_clipped_and_unclipped_squared_errors"
    ),
    "trainer.algorithm.dynamic_sampling.type": ShownBy(
        "skyrl-train/tests/trainer/test_dynamic_sampling.py::test_filter_drops_equal_reward_groups_and_draws_more"
    ),
    "trainer.algorithm.dynamic_sampling.max_sample_batches": ShownBy(
        "skyrl-train/tests/trainer/test_dynamic_sampling.py::test_max_sample_batches_stops_with_error"
    ),
    "trainer.algorithm.dynamic_sampling.min_replace_ratio": ShownBy(
        "skyrl-train/tests/trainer/test_dynamic_sampling.py::test_replace_below_min_ratio_resamples"
    ),
    "trainer.algorithm.max_seq_len": ShownBy(
        "skyrl-train/tests/algorithms/test_reductions.py::test_seq_mean_token_sum_norm_divides_token_sums_by_max_seq_len"
    ),
    "trainer.train_batch_size": ShownBy(_TINY_RUN),
    "trainer.policy_mini_batch_size": ShownBy(_TINY_RUN),
    "trainer.critic_mini_batch_size": ShownBy(_TINY_RUN),
    "trainer.micro_train_batch_size_per_gpu": ShownBy(_TINY_RUN),
    "trainer.micro_forward_batch_size_per_gpu": ShownBy(_TINY_RUN),
    "trainer.update_epochs_per_batch": ShownBy(_TINY_RUN),
    "trainer.epochs": ShownBy(_TINY_RUN),
    "trainer.eval_batch_size": ShownBy(_TINY_RUN),
    "trainer.eval_before_train": ShownBy(_PHASES),
    "trainer.eval_interval": ShownBy(_PHASES),
    "trainer.ckpt_interval": ShownBy(_TINY_RUN),
    "trainer.hf_save_interval": ShownBy(_TINY_RUN),
    "trainer.ckpt_path": ShownBy(_TINY_RUN),
    "trainer.export_path": ShownBy(_TINY_RUN),
    "trainer.max_ckpts_to_keep": ShownBy(
        "skyrl-train/tests/checkpoints/test_checkpoint_manager.py::test_rotation_keeps_the_newest_committed_checkpoints"
    ),
    "trainer.resume_mode": ShownBy(
        "skyrl-train/tests/checkpoints/test_checkpoint_manager.py::test_resume_none_ignores_existing_checkpoints"
    ),
    "trainer.resume_path": ShownBy(
        "skyrl-train/tests/checkpoints/test_checkpoint_manager.py::test_resume_from_path_requires_a_step_folder"
    ),
    "trainer.resume_run_name": ShownBy(_S3 + "test_resume_run_name_falls_back_to_the_environment"),
    "trainer.s3.bucket": ShownBy(_S3 + "test_config_keys_win_over_the_environment"),
    "trainer.s3.prefix": ShownBy(_S3 + "test_an_explicit_prefix_replaces_the_project_name"),
    "trainer.s3.endpoint_url": ShownBy(_S3 + "test_config_keys_win_over_the_environment"),
    "trainer.s3.region": ShownBy(
        "skyrl-train/tests/config/test_key_effects.py::test_s3_region_is_the_configured_one_over_the_environment"
    ),
    "trainer.s3.keep_local": ShownBy(_ROTATION + "test_uploaded_local_copies_beyond_keep_local_are_deleted"),
    "trainer.s3.keep_remote": ShownBy(_ROTATION + "test_remote_copies_beyond_keep_remote_are_deleted_oldest_first"),
    "trainer.s3.eval_bucket": ShownBy(_S3 + "test_eval_dumps_use_the_trajectory_bucket_else_the_checkpoint_bucket"),
    "trainer.s3.upload_attempts": ShownBy(
        "skyrl-train/tests/storage/test_retry.py::test_the_last_transient_error_is_raised_after_all_attempts"
    ),
    "trainer.s3.flush_timeout_seconds": ShownBy(
        "skyrl-train/tests/storage/test_uploader.py::test_exit_wait_is_bounded_and_names_what_is_not_uploaded"
    ),
    "trainer.gradient_checkpointing": ShownBy(_WORKERS),
    "trainer.gradient_checkpointing_use_reentrant": ShownBy(_WORKERS),
    "trainer.max_infra_failure_ratio": ShownBy(
        "skyrl-train/tests/trainer/test_infra_failure_ratio.py::test_step_over_ratio_stops_with_counts"
    ),
    "trainer.seed": ShownBy(
        "skyrl-train/tests/dataset/test_dataloader.py::test_a_different_seed_gives_a_different_order"
    ),
    "trainer.bf16": ShownBy(_WORKERS),
    "trainer.device": ShownBy(
        "skyrl-train/tests/config/test_key_effects.py::test_device_and_an_unset_bf16_place_the_workers_and_pick_their_dtype"
    ),
    "trainer.cpu_threads": ShownBy(
        "skyrl-train/tests/config/test_key_effects.py::test_cpu_threads_is_the_thread_count_of_the_engines_forward_passes"
    ),
    "trainer.max_prompt_length": ShownBy(
        "skyrl-train/tests/dataset/test_dataset.py::test_prompt_one_token_over_max_prompt_length_is_dropped"
    ),
    "trainer.project_name": ShownBy(_S3 + "test_checkpoints_go_under_project_name_and_run_name_by_default"),
    "trainer.run_name": ShownBy(_S3 + "test_checkpoints_go_under_project_name_and_run_name_by_default"),
    "trainer.logger": ShownBy(_TINY_RUN),
    "trainer.dump_data_batch": ShownBy(_TINY_RUN),
    "trainer.dump_eval_results": ShownBy(_TINY_RUN),
    # ------------------------------------------------------------------------------------------- generator
    "generator.max_num_seqs": ShownBy(_ENGINE),
    "generator.enable_prefix_caching": ShownBy(_ENGINE),
    "generator.prefix_cache_bytes": ShownBy(
        "skyrl-train/tests/config/test_key_effects.py::test_prefix_cache_bytes_bounds_the_engines_prefix_cache"
    ),
    "generator.enable_http_endpoint": ShownBy(_ENDPOINT),
    "generator.http_endpoint_host": ShownBy(
        "skyrl-train/tests/config/test_key_effects.py::test_http_endpoint_host_is_where_the_endpoint_listens"
    ),
    "generator.http_endpoint_port": ShownBy(_ENDPOINT),
    "generator.served_model_name": ShownBy(_ENDPOINT),
    "generator.n_samples_per_prompt": ShownBy(_TINY_RUN),
    "generator.max_input_length": ShownBy(
        _LAYOUT + "test_running_context_over_max_input_length_stops_before_the_next_turn"
    ),
    "generator.max_turns": ShownBy(
        "skyrl-train/tests/generators/test_env_calls.py::test_env_gets_max_turns_and_its_config_block"
    ),
    "generator.chat_template_kwargs": ShownBy(
        "skyrl-train/tests/config/test_key_effects.py::test_chat_template_kwargs_reach_the_generators_chat_template"
    ),
    "generator.use_conversation_multi_turn": ShownBy(_LAYOUT + "test_single_message_mode_keeps_one_assistant_message"),
    "generator.append_eos_token_after_stop_str_in_multi_turn": ShownBy(
        _LAYOUT + "test_no_eos_is_appended_when_disabled"
    ),
    "generator.zero_reward_on_non_stop": ShownBy(
        "skyrl-train/tests/generators/test_postprocessing_and_config.py::test_generator_applies_zero_reward_on_non_stop"
    ),
    "generator.apply_overlong_filtering": ShownBy(
        "skyrl-train/tests/generators/test_postprocessing_and_config.py::test_generator_applies_overlong_filtering"
    ),
    "generator.truncated_turn_ends_trajectory": ShownBy(
        "skyrl-train/tests/generators/test_postprocessing_and_config.py::test_truncated_turn_ends_trajectory"
    ),
    "generator.step_wise_trajectories": ShownBy(
        "skyrl-train/tests/trainer/test_step_wise.py::test_step_wise_advantage_broadcast_hand_computed"
    ),
    **_sampling_rows("sampling_params"),
    f"generator.sampling_params.{OPEN_KEY}": Open(
        "passed to the engine unchanged; only keys the hf engine reads are accepted (support.ENGINE_EXTRA_SAMPLING_KEYS)",
        shown_by=_ENGINE_GEN + "test_ignore_eos_generates_through_eos",
        refused_key="presence_penalty",
    ),
    **_sampling_rows("eval_sampling_params"),
    f"generator.eval_sampling_params.{OPEN_KEY}": Open(
        "as generator.sampling_params",
        shown_by=_ENGINE_GEN + "test_ignore_eos_generates_through_eos",
        refused_key="presence_penalty",
    ),
    "generator.eval_n_samples_per_prompt": ShownBy(_TINY_RUN),
    "generator.trajectory_timeout_seconds": ShownBy(
        "skyrl-train/tests/generators/test_failures.py::test_slow_engine_call_times_out"
    ),
    "generator.inject_context_status": ShownBy(_LAYOUT + "test_context_status_is_appended_to_the_observation"),
    # ----------------------------------------------------------------------------------------- environment
    "environment.env_class": ShownBy(_TINY_RUN),
    "environment.skyrl_gym.max_env_workers": ShownBy(
        "skyrl-train/tests/generators/test_env_calls.py::test_zero_env_workers_runs_sync_env_calls_inline"
    ),
    f"environment.skyrl_gym.{OPEN_KEY}": Open(
        "each block is that env's env_config, passed whole to the env it names; a block naming no registered env, or "
        "a key its env does not declare, is refused (config/env_blocks.py, tests/config/test_env_blocks.py)",
        shown_by="skyrl-train/tests/generators/test_env_calls.py::test_env_gets_max_turns_and_its_config_block",
    ),
    # ------------------------------------------------------- fsdp2 on Ray (cpu_offload: GPU-only, refused)
    "trainer.strategy": ShownBy(_KILL_RESUME),
    "trainer.placement.colocate_all": ShownBy(_COLOCATE_ALL),
    "trainer.placement.colocate_policy_ref": ShownBy(_PLACED + _POLICY_REF),
    "trainer.placement.policy_num_nodes": ShownBy(_COLOCATE_ALL),
    "trainer.placement.policy_num_gpus_per_node": ShownBy(_PLACED + _SPLIT),
    "trainer.placement.critic_num_nodes": ShownBy(_COLOCATE_ALL),
    "trainer.placement.critic_num_gpus_per_node": ShownBy(_PLACED + _SPLIT),
    "trainer.placement.ref_num_nodes": ShownBy(_COLOCATE_ALL),
    "trainer.placement.ref_num_gpus_per_node": ShownBy(_PLACED + _SPLIT),
    "trainer.policy.fsdp_config.cpu_offload": Refused("true"),
    "trainer.policy.fsdp_config.reshard_after_forward": ShownBy(_SHARDING),
    "trainer.policy.fsdp_config.fsdp_size": ShownBy(_SHARDING),
    "trainer.ref.fsdp_config.cpu_offload": Refused("true"),
    "trainer.ref.fsdp_config.reshard_after_forward": ShownBy(_SHARDING),
    "trainer.ref.fsdp_config.fsdp_size": ShownBy(_SHARDING),
    "trainer.critic.fsdp_config.cpu_offload": Refused("true"),
    "trainer.critic.fsdp_config.reshard_after_forward": ShownBy(_SHARDING),
    "trainer.critic.fsdp_config.fsdp_size": ShownBy(_SHARDING),
    # off-policy correction: each rule against hand-computed values; the deprecated keys map onto token TIS
    "trainer.algorithm.use_tis": ShownBy(_USE_TIS),
    "trainer.algorithm.tis_imp_ratio_cap": ShownBy(_USE_TIS),
    "trainer.algorithm.off_policy_correction.tis_ratio_type": ShownBy(
        _OPC + "test_token_tis_caps_each_token_ratio_and_counts_the_tokens_above_the_cap"
    ),
    "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high": ShownBy(
        _OPC + "test_token_tis_caps_each_token_ratio_and_counts_the_tokens_above_the_cap"
    ),
    "trainer.algorithm.off_policy_correction.sequence_tis_ratio_clip_high": ShownBy(
        _OPC + "test_sequence_tis_weights_every_token_of_a_row_by_its_capped_product"
    ),
    "trainer.algorithm.off_policy_correction.sequence_mask_metric": ShownBy(_OPC_GEO),
    "trainer.algorithm.off_policy_correction.geo_mask_high": ShownBy(_OPC_GEO),
    "trainer.algorithm.off_policy_correction.geo_mask_low": ShownBy(_OPC_GEO),
    "trainer.algorithm.off_policy_correction.product_mask_high": ShownBy(_OPC_PRODUCT),
    "trainer.algorithm.off_policy_correction.product_mask_low": ShownBy(_OPC_PRODUCT),
    "trainer.algorithm.off_policy_correction.outlier_token_is_threshold_low": ShownBy(_OPC_OUTLIER),
    "trainer.algorithm.off_policy_correction.outlier_token_is_threshold_high": ShownBy(_OPC_OUTLIER),
    # ------------------------------------------------------------------- not implemented (support.py), refused
    "trainer.policy.optimizer_config.offload_after_step": Refused("true"),
    "trainer.critic.optimizer_config.offload_after_step": Refused("true"),
    "trainer.sequence_parallel_backend": Refused("ring"),
    "trainer.policy.sequence_parallel_size": Refused("2"),
    "trainer.ref.sequence_parallel_size": Refused("2"),
    "trainer.critic.sequence_parallel_size": Refused("2"),
    "trainer.use_sample_packing": ShownBy(
        "skyrl-train/tests/config/test_key_effects.py::test_sample_packing_runs_the_policy_and_ref_forwards_as_one_unpadded_row"
    ),
    "trainer.flash_attn": Refused("true"),
    "trainer.policy.use_torch_compile": Refused("true"),
    "trainer.policy.record_memory": Refused("true"),
    "trainer.disable_fast_tokenizer": Refused("true"),
    "trainer.update_ref_every_epoch": Refused("true"),
    "trainer.rope_scaling": Refused("{rope_type: linear, factor: 2.0}"),
    "trainer.rope_theta": Refused("500000.0"),
    "trainer.policy.model.lora.lora_sync_path": ShownBy(_WEIGHT_SYNC_KEYS),
    "trainer.critic.model.lora.lora_sync_path": Refused("/tmp/elsewhere"),
    "trainer.algorithm.sapo.tau_pos": Refused("0.5"),
    "trainer.algorithm.sapo.tau_neg": Refused("0.525"),
    "trainer.algorithm.clip_cov.clip_ratio": Refused("0.0001"),
    "trainer.algorithm.clip_cov.clip_cov_lb": Refused("0.5"),
    "trainer.algorithm.clip_cov.clip_cov_ub": Refused("2.5"),
    "trainer.algorithm.kl_cov.kl_cov_frac": Refused("0.1"),
    "trainer.algorithm.kl_cov.ppo_kl_coef": Refused("0.5"),
    "trainer.algorithm.cispo.cispo_eps_clip_low": Refused("0.5"),
    "trainer.algorithm.cispo.cispo_eps_clip_high": Refused("2.5"),
    "generator.backend": ShownBy(_VLLM + "test_greedy_token_ids_equal_transformers_generate"),
    "generator.run_engines_locally": ShownBy(_REMOTE_ENGINES),
    "generator.remote_inference_engine_urls": ShownBy(_REMOTE_ENGINES),
    "generator.override_existing_update_group": ShownBy(_WEIGHT_SYNC_KEYS),
    "generator.model_name": ShownBy(_REMOTE_ENGINES),
    "generator.model_dtype": ShownBy(_ENGINE_ARGS),
    "generator.num_inference_engines": ShownBy(_REMOTE_ENGINES),
    "generator.inference_engine_tensor_parallel_size": ShownBy(
        _VLLM_CFG + "test_tensor_parallel_engines_use_the_multiprocessing_executor"
    ),
    "generator.inference_engine_pipeline_parallel_size": ShownBy(_REMOTE_ENGINES),
    "generator.inference_engine_expert_parallel_size": Refused("2"),
    "generator.inference_engine_data_parallel_size": ShownBy(_REMOTE_ENGINES),
    "generator.weight_sync_backend": ShownBy(_WEIGHT_SYNC_KEYS),
    "generator.weight_transfer_threshold_cuda_ipc_GB": ShownBy(
        "skyrl-train/tests/config/test_key_effects.py::"
        "test_the_cuda_ipc_threshold_is_the_chunk_size_of_a_cuda_ipc_weight_sync"
    ),
    "generator.vllm_v1_disable_multiproc": Refused("false"),
    "generator.enable_chunked_prefill": ShownBy(_ENGINE_ARGS),
    "generator.max_num_batched_tokens": ShownBy(_ENGINE_ARGS),
    "generator.enforce_eager": ShownBy(_ENGINE_ARGS),
    "generator.fully_sharded_loras": ShownBy(
        _VLLM_CFG + "test_lora_adds_upstreams_engine_kwargs_and_leaves_eager_mode"
    ),
    "generator.enable_ray_prometheus_stats": Refused("true"),
    "generator.gpu_memory_utilization": ShownBy(_ENGINE_ARGS),
    "generator.engine_init_kwargs": ShownBy(_VLLM_CFG + "test_engine_init_kwargs_are_applied_last"),
    "generator.rope_scaling": Refused("{rope_type: linear, factor: 2.0}"),
    "generator.rope_theta": Refused("500000.0"),
    "generator.async_engine": Refused("false"),
    "generator.batched": Refused("true"),
    "generator.chat_template.source": Refused("file"),
    "generator.chat_template.name_or_path": Refused("/tmp/template.jinja"),
}


def _schema_keys(cls: type = SkyRLConfig, prefix: str = "") -> list[str]:
    keys = []
    for f in dataclasses.fields(cls):
        if f.name == extra_keys_field(cls):
            keys.append(prefix + OPEN_KEY)
        elif dataclasses.is_dataclass(f.type):
            keys += _schema_keys(f.type, f"{prefix}{f.name}.")
        else:
            keys.append(prefix + f.name)
    return keys


def _rows(kind: type) -> list[tuple[str, object]]:
    return [(key, row) for key, row in ROWS.items() if isinstance(row, kind)]


def _test_function_exists(node_id: str) -> None:
    path, _, name = node_id.partition("::")
    file = REPO_ROOT / path
    assert file.is_file(), f"{path} does not exist"
    defined = {
        node.name
        for node in ast.walk(ast.parse(file.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert name in defined, f"{path} defines no function {name}"


def test_the_table_has_exactly_one_row_per_key_of_the_schema():
    keys = _schema_keys()
    assert len(keys) == len(set(keys))
    assert sorted(set(keys) - set(ROWS)) == [], "keys without a row"
    assert sorted(set(ROWS) - set(keys)) == [], "rows naming no key"


def test_the_refused_rows_are_the_not_implemented_table():
    assert {key for key, _ in _rows(Refused)} == set(NOT_IMPLEMENTED)


@pytest.mark.parametrize("key, row", _rows(Refused), ids=[key for key, _ in _rows(Refused)])
def test_refused_key_is_refused_naming_it(key, row):
    with pytest.raises(ConfigError) as error:
        load_config([f"{key}={row.value}"])
    assert any(
        p.startswith(f"{key}=") and "is not implemented in this fork" in p for p in error.value.problems
    ), error.value.problems


@pytest.mark.parametrize("key, row", _rows(ShownBy), ids=[key for key, _ in _rows(ShownBy)])
def test_shown_by_test_exists(key, row):
    _test_function_exists(row.test)


@pytest.mark.parametrize("key, row", _rows(Open), ids=[key for key, _ in _rows(Open)])
def test_open_block_rule_is_tested(key, row):
    _test_function_exists(row.shown_by)
    if row.refused_key is not None:
        extra = key.replace(OPEN_KEY, row.refused_key)
        with pytest.raises(ConfigError) as error:
            load_config([f"+{extra}=1"])
        assert any(p.startswith(extra) and "is not implemented in this fork" in p for p in error.value.problems)
