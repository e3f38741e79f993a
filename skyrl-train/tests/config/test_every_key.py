"""Every config key either changes what a run builds or does, or is refused when set: no key is silently ignored.

`ROWS` has one row per key of the schema (and one per open block):
- `Refused(value)`: setting the key to `value` (a non-default, in override syntax) makes `load_config` raise a
  `ConfigError` naming the key and saying it is not implemented. These are exactly the keys of
  `skyrl_train/config/support.py`'s `NOT_IMPLEMENTED` table.
- `Effect(probe, value, reads, where=...)`: a probe (`every_key_probes.py`: the workers, the hf engine, one update on
  a fixed batch, one trainer step on fixed rollouts, a training batch's rollouts, a tiny run, the vLLM engine
  arguments, the fsdp2 placement plan, ...) builds its part from a config with `where` (what makes the key apply)
  and reads `reads`; the test reads it again with the key set to `value` and asserts the two differ (and, with
  `expect`, that the second is that value). A key whose full effect needs Ray, vLLM or a GPU has its wiring checked
  here (the value reaches the object that uses it) and names the slow test that shows the rest (`slow`).
  A key of `support.CONDITIONAL` whose condition does not hold in the base config is also checked to be refused
  there ("has no effect in this config").
- `Open(name, effect, refused)` for a block with free-form keys: `effect` for the concrete key `name`, and a key
  the block refuses.

Implementing a refused key: delete its entry in `support.NOT_IMPLEMENTED` and change its row here to an `Effect`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
import yaml

from skyrl_train.config import ConfigError, SkyRLConfig, load_config
from skyrl_train.config.schema import extra_keys_field
from skyrl_train.config.support import CONDITIONAL, NOT_IMPLEMENTED, default_of

from .every_key_probes import (
    ADDED_KEYS,
    CHECKPOINTS,
    DYNAMIC_SAMPLER,
    ENDPOINT,
    ENV_RUNNER,
    EVAL_GENERATION,
    GENERATION_PROMPT,
    HF_ENGINE,
    LOADER,
    PLACEMENT,
    REMOTE_ENGINES,
    RUN,
    S3,
    SFT,
    SHARDING,
    STEP,
    STRATEGY,
    TRAIN_GENERATION,
    TRAINER_LOOP,
    TURNS_ENV,
    UPDATE,
    VLLM_ARGS,
    WARM_START,
    WORKERS,
    Probe,
    config_for,
    observe,
    turns_env_registered,
)

OPEN_KEY = "<any other key>"


@pytest.fixture(scope="module", autouse=True)
def _turns_env():
    with turns_env_registered():
        yield


UNCHECKED = object()


class Refused(NamedTuple):
    value: str


class Effect(NamedTuple):
    probe: Probe
    value: str
    reads: str
    where: tuple[str, ...] = ()
    expect: Any = UNCHECKED
    slow: str | None = None
    together: tuple[str, ...] = ()
    """Other settings the value needs: set with it, not in the default's config."""


class Open(NamedTuple):
    name: str
    """A concrete key of the block."""
    effect: Effect
    refused: str | None = None
    """A key the block refuses (`support.ENGINE_EXTRA_SAMPLING_KEYS`)."""


def where(*overrides: str) -> tuple[str, ...]:
    return overrides


WARM_START_ON = ("trainer.warm_start=true", "sft.train_data=[{workdir}/chats.jsonl]")
CRITIC = "trainer.critic.model.path={tiny}"
POLICY_LORA = "trainer.policy.model.lora.rank=4"
CRITIC_LORA = "trainer.critic.model.lora.rank=4"
GREEDY = "generator.sampling_params.temperature=0.0"
MULTI_TURN = "generator.max_turns=2"
EVAL_GREEDY = "generator.eval_sampling_params.temperature=0.0"
DUAL_CLIP = "trainer.algorithm.policy_loss_type=dual_clip"
KL_IN_REWARD = (
    "trainer.algorithm.use_kl_loss=false",
    "trainer.algorithm.use_kl_in_reward=true",
    "trainer.ref.model.path={tiny_other}",
)
ADAPTIVE_KL = (*KL_IN_REWARD, "trainer.algorithm.kl_ctrl.type=adaptive")
SPLIT = "trainer.placement.colocate_all=false"
ASYNC = "trainer.fully_async.max_staleness_steps=1"
_OPC = "trainer.algorithm.off_policy_correction."
CUDA_IPC = (
    "trainer.strategy=fsdp2",
    "generator.backend=vllm",
    "trainer.placement.colocate_all=true",
    "generator.weight_sync_backend=nccl",
    "trainer.algorithm.use_kl_loss=false",
)
# slow tests (Ray, vLLM, a GPU), named for the part of the effect the fast wiring check cannot show
_PLACED = "skyrl-train/tests/distributed/test_placement_cluster.py::"
_COLOCATE_ALL = _PLACED + "test_colocate_all_over_two_nodes_shares_each_gpu_between_the_ranks_of_every_role"
_POLICY_REF = _PLACED + "test_colocate_policy_ref_shares_gpus_three_to_one_and_the_critic_takes_the_other_node"
_SPLIT = _PLACED + "test_split_layout_packs_each_role_onto_whole_gpus"
_SHARDED = (
    "skyrl-train/tests/distributed/test_shard_model.py::test_fsdp_size_and_reshard_after_forward_decide_the_layout"
)
_KILL_RESUME = (
    "skyrl-train/tests/trainer/test_kill_and_resume.py::"
    "test_killed_runs_resume_from_the_last_complete_checkpoint_at_the_same_data_position"
)
_VLLM = (
    "skyrl-train/tests/inference_engines/vllm/test_vllm_engine.py::test_greedy_token_ids_equal_transformers_generate"
)
_ENDPOINT = "skyrl-train/tests/serve/test_policy_endpoint.py::test_training_serves_the_live_policy_while_generating"
_UPSTREAM_PORTS = "skyrl-train/tests/upstream_ports/test_upstream_ports.py::test_dapo_trainer_reads_its_added_keys"
_OPTIMIZER_KEYS = ("lr", "adam_betas", "weight_decay", "max_grad_norm", "num_warmup_steps", "scheduler")


def _lora_rows(role: str, rank_where: str, extra: tuple[str, ...]) -> dict[str, Effect]:
    at = f"trainer.{role}.model.lora"
    w = (*extra, rank_where)
    return {
        f"{at}.rank": Effect(WORKERS, "4", f"{role}.trainable_parameters", extra),
        f"{at}.alpha": Effect(WORKERS, "32", f"{role}.lora_scaling", w, expect=8.0),
        f"{at}.dropout": Effect(WORKERS, "0.25", f"{role}.lora_dropout", w, expect=0.25),
        f"{at}.target_modules": Effect(
            WORKERS, "[q_proj,v_proj]", f"{role}.lora_modules", w, expect=["q_proj", "q_proj", "v_proj", "v_proj"]
        ),
        f"{at}.exclude_modules": Effect(WORKERS, "[o_proj]", f"{role}.lora_modules", w),
        f"{at}.init_method": Effect(WORKERS, "gaussian", f"{role}.lora_A_std", w),
    }


def _optimizer_rows(role: str, extra: tuple[str, ...]) -> dict[str, Effect]:
    at = f"trainer.{role}.optimizer_config"
    return {
        f"{at}.lr": Effect(WORKERS, "0.5", f"{role}.lr_schedule", extra, expect=[0.5, 0.5, 0.5]),
        f"{at}.adam_betas": Effect(WORKERS, "[0.5,0.75]", f"{role}.betas", extra, expect=(0.5, 0.75)),
        f"{at}.weight_decay": Effect(WORKERS, "0.3", f"{role}.weight_decay", extra, expect=0.3),
        f"{at}.max_grad_norm": Effect(UPDATE, "0.001", f"{role}.weight_change", (*extra, f"{at}.lr=1e-3")),
        f"{at}.num_warmup_steps": Effect(WORKERS, "4", f"{role}.lr_schedule", extra),
        f"{at}.scheduler": Effect(WORKERS, "cosine", f"{role}.lr_schedule", (*extra, f"{at}.num_warmup_steps=1")),
    }


def _sampling_rows(block: str) -> dict[str, Effect]:
    """Both blocks reach the hf engine through the generator: train batches read `sampling_params`, evals
    `eval_sampling_params` (greedy by default: the sampling filters are checked at temperature 1)."""
    train = block == "sampling_params"
    probe = TRAIN_GENERATION if train else EVAL_GENERATION
    at = f"generator.{block}"
    sampled = () if train else (f"{at}.temperature=1.0",)
    greedy = (f"{at}.temperature=0.0",) if train else ()
    return {
        f"{at}.max_generate_length": Effect(probe, "2", "response_ids"),
        f"{at}.repetition_penalty": Effect(probe, "1.5", "rollout_logprobs", sampled),
        f"{at}.temperature": Effect(probe, "0.5" if train else "1.0", "rollout_logprobs"),
        f"{at}.top_p": Effect(probe, "0.5", "rollout_logprobs", sampled),
        f"{at}.min_p": Effect(probe, "0.99", "rollout_logprobs", sampled),
        f"{at}.top_k": Effect(probe, "2", "rollout_logprobs", sampled),
        f"{at}.logprobs": Effect(probe, "null", "rollout_logprobs", expect=[None]),
        f"{at}.stop": Effect(probe, '["\n"]', "stop_reasons", greedy),
        f"{at}.seed": Effect(probe, "7", "response_ids", sampled),
    }


ROWS: dict[str, Refused | Effect | Open] = {
    # ------------------------------------------------------------------------------------------------ data
    "data.train_data": Effect(
        LOADER, "[{workdir}/other.jsonl]", "prompts", expect=[["Name 0 colours.", "Name 1 colours."]]
    ),
    "data.val_data": Effect(EVAL_GENERATION, "[{workdir}/prompts.jsonl]", "rows", expect=[2, 2, 2, 2, 1]),
    "data.balance_by": Effect(LOADER, "data_source", "sources", expect=[["a", "b"]] * 4),
    # --------------------------------------------------------------------------------------------- trainer
    "trainer.policy.model.path": Effect(WORKERS, "{tiny_other}", "policy.weights"),
    **_lora_rows("policy", POLICY_LORA, ()),
    **_optimizer_rows("policy", ()),
    "trainer.policy.model_config_kwargs": Effect(
        WORKERS, "{attention_dropout: 0.125}", "policy.attention_dropout", expect=0.125
    ),
    "trainer.ref.model.path": Effect(WORKERS, "{tiny_other}", "ref.weights"),
    "trainer.ref.model_config_kwargs": Effect(
        WORKERS, "{attention_dropout: 0.125}", "ref.attention_dropout", expect=0.125
    ),
    "trainer.critic.model.path": Effect(WORKERS, "{tiny}", "critic", expect="CriticWorker"),
    **_lora_rows("critic", CRITIC_LORA, (CRITIC,)),
    **_optimizer_rows("critic", (CRITIC,)),
    "trainer.critic.model_config_kwargs": Effect(
        WORKERS, "{attention_dropout: 0.125}", "critic.attention_dropout", where(CRITIC), expect=0.125
    ),
    "trainer.algorithm.advantage_estimator": Effect(STEP, "rloo", "advantages"),
    "trainer.algorithm.kl_ctrl.type": Effect(STEP, "adaptive", "kl_coef_after", KL_IN_REWARD),
    "trainer.algorithm.kl_ctrl.kl_target": Effect(STEP, "0.0001", "kl_coef_after", ADAPTIVE_KL),
    "trainer.algorithm.kl_ctrl.horizon": Effect(STEP, "100", "kl_coef_after", ADAPTIVE_KL),
    "trainer.algorithm.kl_estimator_type": Effect(UPDATE, "k1", "policy/policy_kl"),
    "trainer.algorithm.use_kl_in_reward": Effect(
        STEP, "true", "kl_in_reward", where("trainer.algorithm.use_kl_loss=false")
    ),
    "trainer.algorithm.use_kl_loss": Effect(WORKERS, "false", "ref", expect=None),
    "trainer.algorithm.kl_loss_coef": Effect(UPDATE, "0.5", "policy/final_loss"),
    "trainer.algorithm.use_entropy_loss": Effect(UPDATE, "true", "policy/final_loss"),
    "trainer.algorithm.entropy_loss_coef": Effect(
        UPDATE, "0.5", "policy/final_loss", where("trainer.algorithm.use_entropy_loss=true")
    ),
    "trainer.algorithm.advantage_batch_normalize": Effect(STEP, "true", "advantages"),
    "trainer.algorithm.value_head_prefix": Effect(WORKERS, "score", "critic.heads", where(CRITIC)),
    "trainer.algorithm.policy_loss_type": Effect(UPDATE, "gspo", "policy/policy_loss"),
    "trainer.algorithm.loss_reduction": Effect(UPDATE, "sequence_mean", "policy/policy_loss"),
    "trainer.algorithm.grpo_norm_by_std": Effect(STEP, "false", "advantages"),
    "trainer.algorithm.zero_variance_filter": Effect(STEP, "true", "loss_mask"),
    "trainer.algorithm.zero_variance_kl_rows": Effect(
        STEP,
        "1",
        "loss_mask",
        where("trainer.algorithm.zero_variance_filter=true", "trainer.algorithm.use_kl_loss=true"),
    ),
    "trainer.algorithm.zero_variance_kl_coef": Effect(
        STEP,
        "5.0",
        "policy/final_loss",
        where(
            "trainer.algorithm.zero_variance_filter=true",
            "trainer.algorithm.use_kl_loss=true",
            "trainer.algorithm.zero_variance_kl_rows=1",
            "trainer.ref.model.path={tiny_other}",
        ),
    ),
    "trainer.algorithm.ptx_coef": Effect(STEP, "1.0", "ptx_conversations", where(*WARM_START_ON), expect=4),
    "trainer.algorithm.ptx_batch_size": Effect(
        STEP, "2", "ptx_conversations", where(*WARM_START_ON, "trainer.algorithm.ptx_coef=1.0"), expect=2
    ),
    "trainer.algorithm.hinted_rows_positive_only": Effect(
        STEP, "true", "advantages", where("generator.train_without_hints=true")
    ),
    "trainer.algorithm.lambd": Effect(
        STEP,
        "0.5",
        "advantages",
        where(CRITIC, "trainer.critic_mini_batch_size=2", "trainer.algorithm.advantage_estimator=gae"),
    ),
    "trainer.algorithm.gamma": Effect(
        STEP, "0.5", "returns", where("trainer.algorithm.advantage_estimator=reinforce++")
    ),
    "trainer.algorithm.eps_clip_low": Effect(UPDATE, "0.01", "policy/loss_metrics/clip_frac_low"),
    "trainer.algorithm.eps_clip_high": Effect(UPDATE, "0.01", "policy/loss_metrics/clip_frac_high"),
    "trainer.algorithm.clip_ratio_c": Effect(UPDATE, "1.1", "policy/policy_loss", where(DUAL_CLIP)),
    "trainer.algorithm.value_clip": Effect(
        UPDATE, "0.01", "critic/critic_loss", where(CRITIC, "trainer.critic.optimizer_config.lr=1e-3")
    ),
    "trainer.algorithm.dynamic_sampling.type": Effect(
        DYNAMIC_SAMPLER,
        "filter",
        "batches",
        expect=[None, 4, None],
        slow="skyrl-train/tests/trainer/test_dynamic_sampling.py::test_filter_drops_equal_reward_groups_and_draws_more",
    ),
    "trainer.algorithm.dynamic_sampling.max_sample_batches": Effect(
        DYNAMIC_SAMPLER, "1", "batches", where("trainer.algorithm.dynamic_sampling.type=filter")
    ),
    "trainer.algorithm.dynamic_sampling.min_replace_ratio": Effect(
        DYNAMIC_SAMPLER, "0.9", "batches", where("trainer.algorithm.dynamic_sampling.type=replace"), expect=[None] * 3
    ),
    "trainer.algorithm.max_seq_len": Effect(
        UPDATE, "64", "policy/policy_loss", where("trainer.algorithm.loss_reduction=seq_mean_token_sum_norm")
    ),
    f"trainer.algorithm.{OPEN_KEY}": Open(
        "overlong_buffer_len",
        Effect(ADDED_KEYS, "512", "trainer.algorithm", expect=512, slow=_UPSTREAM_PORTS),
        refused="eps_clip_hihg",
    ),
    "trainer.train_batch_size": Effect(LOADER, "4", "batch_sizes", expect=[4, 4]),
    "trainer.policy_mini_batch_size": Effect(STEP, "1", "calls"),
    "trainer.critic_mini_batch_size": Effect(STEP, "1", "calls", where(CRITIC, "trainer.critic_mini_batch_size=2")),
    "trainer.micro_train_batch_size_per_gpu": Effect(STEP, "1", "calls"),
    "trainer.micro_forward_batch_size_per_gpu": Effect(STEP, "1", "calls", where("trainer.update_epochs_per_batch=2")),
    "trainer.update_epochs_per_batch": Effect(STEP, "2", "calls"),
    "trainer.epochs": Effect(RUN, "2", "generate_calls"),
    "trainer.eval_batch_size": Effect(RUN, "1", "generate_calls"),
    "trainer.eval_before_train": Effect(RUN, "false", "generate_calls"),
    "trainer.eval_interval": Effect(RUN, "-1", "generate_calls"),
    "trainer.ckpt_interval": Effect(RUN, "-1", "tree"),
    "trainer.hf_save_interval": Effect(RUN, "1", "tree", where("trainer.epochs=2")),
    "trainer.ckpt_path": Effect(RUN, "{workdir}/elsewhere", "tree"),
    "trainer.export_path": Effect(RUN, "{workdir}/elsewhere", "tree"),
    # No Hub here (or no token / offline mode anywhere else): the preflight refuses, naming the repo.
    "trainer.push_to_hub": Effect(RUN, "true", "outcome", together=("trainer.hub_model_id=skyrl-tests/tiny",)),
    "trainer.hub_model_id": Effect(
        RUN, "skyrl-tests/other", "outcome", where("trainer.push_to_hub=true", "trainer.hub_model_id=skyrl-tests/tiny")
    ),
    "trainer.max_ckpts_to_keep": Effect(CHECKPOINTS, "2", "kept", expect=[2, 3]),
    "trainer.resume_mode": Effect(CHECKPOINTS, "none", "resume_from", expect=None),
    "trainer.resume_path": Effect(
        CHECKPOINTS,
        "{workdir}/ckpts/global_step_2",
        "resume_from",
        where("trainer.resume_mode=from_path", "trainer.resume_path={workdir}/ckpts/global_step_1"),
        expect="global_step_2",
    ),
    "trainer.resume_run_name": Effect(S3, "earlier_run", "settings"),
    "trainer.s3.bucket": Effect(S3, "other", "settings"),
    "trainer.s3.prefix": Effect(S3, "team/x", "settings"),
    "trainer.s3.endpoint_url": Effect(S3, "http://127.0.0.1:9000", "settings"),
    "trainer.s3.region": Effect(S3, "ap-south-1", "settings"),
    "trainer.s3.keep_local": Effect(S3, "2", "settings"),
    "trainer.s3.keep_remote": Effect(S3, "5", "settings"),
    "trainer.s3.eval_bucket": Effect(S3, "evals", "settings"),
    "trainer.s3.upload_attempts": Effect(S3, "2", "settings"),
    "trainer.s3.flush_timeout_seconds": Effect(S3, "5.0", "settings"),
    "trainer.gradient_checkpointing": Effect(WORKERS, "true", "policy.gradient_checkpointing", expect=True),
    "trainer.gradient_checkpointing_use_reentrant": Effect(
        WORKERS, "true", "policy.reentrant", where("trainer.gradient_checkpointing=true"), expect=True
    ),
    "trainer.max_infra_failure_ratio": Effect(
        RUN, "1.0", "outcome", where("generator.trajectory_timeout_seconds=1e-9"), expect=None
    ),
    "trainer.seed": Effect(LOADER, "7", "prompts"),
    "trainer.fully_async.max_staleness_steps": Effect(TRAINER_LOOP, "1", "trainer", expect="FullyAsyncPPOTrainer"),
    "trainer.fully_async.num_parallel_generation_workers": Effect(
        TRAINER_LOOP, "3", "generation_workers", where(ASYNC), expect=3
    ),
    "trainer.fully_async.default_correction": Effect(TRAINER_LOOP, "false", "tis", where(ASYNC), expect=None),
    "trainer.bf16": Effect(WORKERS, "true", "policy.compute_dtype", expect="torch.bfloat16"),
    "trainer.device": Effect(STRATEGY, "cpu" if torch.cuda.is_available() else "cuda", "device"),
    "trainer.cpu_threads": Effect(HF_ENGINE, "1", "num_threads", expect=1),
    "trainer.max_prompt_length": Effect(LOADER, "70", "dataset_size", expect=8),
    "trainer.project_name": Effect(S3, "other_project", "settings"),
    "trainer.run_name": Effect(S3, "other_run", "settings"),
    "trainer.logger": Effect(RUN, "tensorboard", "tree"),
    "trainer.dump_data_batch": Effect(STEP, "true", "dumped", expect=["global_step_0_training_input.pkl"]),
    "trainer.dump_eval_results": Effect(RUN, "true", "tree"),
    # ------------------------------------------------------------------------------------------- generator
    "generator.max_num_seqs": Effect(HF_ENGINE, "2", "max_num_seqs", expect=2),
    "generator.enable_prefix_caching": Effect(HF_ENGINE, "false", "prefix_cache_bytes", expect=0),
    "generator.prefix_cache_bytes": Effect(HF_ENGINE, "6000", "prefix_cache_bytes", expect=6000),
    "generator.enable_http_endpoint": Effect(ENDPOINT, "false", "endpoint", expect=None, slow=_ENDPOINT),
    "generator.http_endpoint_host": Effect(ENDPOINT, "127.0.0.2", "endpoint", slow=_ENDPOINT),
    "generator.http_endpoint_port": Effect(ENDPOINT, "0", "endpoint", slow=_ENDPOINT),
    "generator.served_model_name": Effect(ENDPOINT, "served", "endpoint", slow=_ENDPOINT),
    "generator.http_endpoint_api_key": Effect(ENDPOINT, "sk-endpoint", "api_key", expect="sk-endpoint"),
    "generator.n_samples_per_prompt": Effect(TRAIN_GENERATION, "3", "rows", expect=[3]),
    "generator.max_input_length": Effect(
        TRAIN_GENERATION, "200", "rewards", where("trainer.max_prompt_length=60", "generator.max_turns=3")
    ),
    "generator.max_turns": Effect(TRAIN_GENERATION, "2", "rewards"),
    "generator.chat_template_kwargs": Effect(
        GENERATION_PROMPT, "{think: true}", "text", expect="<|im_start|>assistant\n<think>"
    ),
    "generator.use_conversation_multi_turn": Effect(TRAIN_GENERATION, "false", "response_ids", where(MULTI_TURN)),
    "generator.append_eos_token_after_stop_str_in_multi_turn": Effect(
        TRAIN_GENERATION, "false", "response_ids", where(MULTI_TURN, GREEDY, 'generator.sampling_params.stop=["\n"]')
    ),
    "generator.zero_reward_on_non_stop": Effect(TRAIN_GENERATION, "true", "rewards"),
    "generator.apply_overlong_filtering": Effect(TRAIN_GENERATION, "true", "loss_masks"),
    "generator.truncated_turn_ends_trajectory": Effect(TRAIN_GENERATION, "true", "rewards", where(MULTI_TURN)),
    "generator.train_without_hints": Effect(TRAIN_GENERATION, "true", "prompt_token_ids"),
    "generator.step_wise_trajectories": Effect(TRAIN_GENERATION, "true", "rows", where(MULTI_TURN), expect=[4]),
    **_sampling_rows("sampling_params"),
    f"generator.sampling_params.{OPEN_KEY}": Open(
        "ignore_eos", Effect(TRAIN_GENERATION, "true", "engine_sampling_params"), refused="presence_penalty"
    ),
    **_sampling_rows("eval_sampling_params"),
    f"generator.eval_sampling_params.{OPEN_KEY}": Open(
        "ignore_eos", Effect(EVAL_GENERATION, "true", "engine_sampling_params"), refused="presence_penalty"
    ),
    "generator.eval_n_samples_per_prompt": Effect(EVAL_GENERATION, "2", "rows", expect=[4]),
    "generator.trajectory_timeout_seconds": Effect(TRAIN_GENERATION, "1e-9", "stop_reasons"),
    "generator.inject_context_status": Effect(TRAIN_GENERATION, "true", "response_ids", where(MULTI_TURN)),
    f"generator.{OPEN_KEY}": Open(
        "miniswe_traj_dir", Effect(ADDED_KEYS, "/tmp/trajs", "generator", expect="/tmp/trajs"), refused="max_turn"
    ),
    # ----------------------------------------------------------------------------------------- environment
    "environment.env_class": Effect(TRAIN_GENERATION, "gsm8k", "rewards"),
    "environment.skyrl_gym.max_env_workers": Effect(ENV_RUNNER, "0", "pool_threads", expect=0),
    f"environment.skyrl_gym.{OPEN_KEY}": Open(TURNS_ENV, Effect(ENV_RUNNER, "{reward: 0.5}", "env")),
    # ------------------------------------------------------------------- sft (main_sft, trainer.warm_start)
    "sft.train_data": Effect(SFT, "[{workdir}/chats_other.jsonl]", "conversations", expect=2),
    "sft.eval_data": Effect(SFT, "[{workdir}/chats.jsonl]", "eval_conversations", expect=4),
    "sft.messages_key": Effect(SFT, "chat", "response_ids"),
    "sft.tools_key": Effect(SFT, "functions", "outcome"),  # the tiny model's template renders no tools: refused
    "sft.max_length": Effect(SFT, "20", "outcome"),
    "sft.truncation": Effect(SFT, "truncate", "outcome", where("sft.max_length=60"), expect=None),
    "sft.train_on_what": Effect(SFT, "last_assistant_message", "loss_tokens"),
    "sft.num_steps": Effect(SFT, "3", "steps", expect=3),
    "sft.num_epochs": Effect(SFT, "2", "steps", expect=4),
    "sft.batch_size": Effect(SFT, "1", "batch_sizes", expect=[1, 1, 1, 1]),
    "sft.lr": Effect(SFT, "0.5", "lr", expect=0.5),
    "trainer.warm_start": Effect(
        RUN, "true", "tree", where("sft.train_data=[{workdir}/chats.jsonl]", "sft.batch_size=2")
    ),
    "trainer.warm_start_reference": Effect(WARM_START, "base", "fold", expect=False),
    # ------------------------------------------------------- fsdp2 on Ray (cpu_offload: GPU-only, refused)
    "trainer.strategy": Effect(STRATEGY, "fsdp2", "strategy", expect="FSDP2", slow=_KILL_RESUME),
    "trainer.placement.colocate_all": Effect(PLACEMENT, "false", "roles", slow=_COLOCATE_ALL),
    "trainer.placement.colocate_policy_ref": Effect(
        PLACEMENT, "false", "groups", where(SPLIT), expect=[1, 1], slow=_POLICY_REF
    ),
    "trainer.placement.policy_num_nodes": Effect(
        PLACEMENT,
        "2",
        "groups",
        where(SPLIT, "trainer.placement.colocate_policy_ref=false"),
        expect=[2, 1],
        slow=_COLOCATE_ALL,
    ),
    "trainer.placement.policy_num_gpus_per_node": Effect(
        PLACEMENT,
        "2",
        "groups",
        where(SPLIT, "trainer.placement.colocate_policy_ref=false"),
        expect=[2, 1],
        slow=_SPLIT,
    ),
    "trainer.placement.critic_num_nodes": Effect(
        PLACEMENT, "2", "groups", where(SPLIT, CRITIC), expect=[1, 2], slow=_COLOCATE_ALL
    ),
    "trainer.placement.critic_num_gpus_per_node": Effect(
        PLACEMENT, "2", "groups", where(SPLIT, CRITIC), expect=[1, 2], slow=_SPLIT
    ),
    "trainer.placement.ref_num_nodes": Effect(
        PLACEMENT,
        "2",
        "groups",
        where(SPLIT, "trainer.placement.colocate_policy_ref=false"),
        expect=[1, 2],
        slow=_COLOCATE_ALL,
    ),
    "trainer.placement.ref_num_gpus_per_node": Effect(
        PLACEMENT,
        "2",
        "groups",
        where(SPLIT, "trainer.placement.colocate_policy_ref=false"),
        expect=[1, 2],
        slow=_SPLIT,
    ),
    "trainer.policy.fsdp_config.cpu_offload": Refused("true"),
    "trainer.policy.fsdp_config.reshard_after_forward": Effect(SHARDING, "false", "policy", slow=_SHARDED),
    "trainer.policy.fsdp_config.fsdp_size": Effect(SHARDING, "2", "policy", slow=_SHARDED),
    "trainer.ref.fsdp_config.cpu_offload": Refused("true"),
    "trainer.ref.fsdp_config.reshard_after_forward": Effect(SHARDING, "false", "ref", slow=_SHARDED),
    "trainer.ref.fsdp_config.fsdp_size": Effect(SHARDING, "2", "ref", slow=_SHARDED),
    "trainer.critic.fsdp_config.cpu_offload": Refused("true"),
    "trainer.critic.fsdp_config.reshard_after_forward": Effect(
        SHARDING, "false", "critic", where(CRITIC), slow=_SHARDED
    ),
    "trainer.critic.fsdp_config.fsdp_size": Effect(SHARDING, "2", "critic", where(CRITIC), slow=_SHARDED),
    # off-policy correction: each rule in the update's metrics; the deprecated keys map onto token TIS
    "trainer.algorithm.use_tis": Effect(
        UPDATE, "true", "policy/final_loss", together=("trainer.algorithm.tis_imp_ratio_cap=1.5",)
    ),
    "trainer.algorithm.tis_imp_ratio_cap": Effect(
        UPDATE,
        "1.2",
        "policy/final_loss",
        where("trainer.algorithm.use_tis=true", "trainer.algorithm.tis_imp_ratio_cap=1.5"),
    ),
    _OPC + "tis_ratio_type": Effect(UPDATE, "sequence", "policy/final_loss"),
    _OPC
    + "token_tis_ratio_clip_high": Effect(UPDATE, "1.5", "policy/final_loss", where(_OPC + "tis_ratio_type=token")),
    _OPC
    + "sequence_tis_ratio_clip_high": Effect(
        UPDATE, "1.5", "policy/final_loss", where(_OPC + "tis_ratio_type=sequence")
    ),
    _OPC + "sequence_mask_metric": Effect(UPDATE, "geometric", "policy/final_loss"),
    _OPC + "geo_mask_high": Effect(UPDATE, "1.5", "policy/final_loss", where(_OPC + "sequence_mask_metric=geometric")),
    _OPC + "geo_mask_low": Effect(UPDATE, "0.5", "policy/final_loss", where(_OPC + "sequence_mask_metric=geometric")),
    _OPC
    + "product_mask_high": Effect(UPDATE, "1.2", "policy/final_loss", where(_OPC + "sequence_mask_metric=product")),
    _OPC + "product_mask_low": Effect(UPDATE, "0.2", "policy/final_loss", where(_OPC + "sequence_mask_metric=product")),
    _OPC + "outlier_token_is_threshold_low": Effect(UPDATE, "0.9", "policy/final_loss"),
    _OPC + "outlier_token_is_threshold_high": Effect(UPDATE, "1.5", "policy/final_loss"),
    # ------------------------------------------------------------------- not implemented (support.py), refused
    "trainer.policy.optimizer_config.offload_after_step": Refused("true"),
    "trainer.critic.optimizer_config.offload_after_step": Refused("true"),
    "trainer.sequence_parallel_backend": Refused("ring"),
    "trainer.policy.sequence_parallel_size": Refused("2"),
    "trainer.ref.sequence_parallel_size": Refused("2"),
    "trainer.critic.sequence_parallel_size": Refused("2"),
    "trainer.use_sample_packing": Effect(UPDATE, "true", "forwards"),
    "trainer.flash_attn": Refused("true"),
    "trainer.policy.use_torch_compile": Refused("true"),
    "trainer.policy.record_memory": Refused("true"),
    "trainer.disable_fast_tokenizer": Refused("true"),
    "trainer.update_ref_every_epoch": Refused("true"),
    "trainer.rope_scaling": Refused("{rope_type: linear, factor: 2.0}"),
    "trainer.rope_theta": Refused("500000.0"),
    "trainer.policy.model.lora.lora_sync_path": Effect(
        REMOTE_ENGINES, "{workdir}/adapters", "sync", where(POLICY_LORA)
    ),
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
    "generator.backend": Effect(STRATEGY, "vllm", "weight_sync", slow=_VLLM),
    "generator.run_engines_locally": Effect(STRATEGY, "false", "weight_sync"),
    "generator.remote_inference_engine_urls": Effect(
        REMOTE_ENGINES, "[127.0.0.1:8102]", "urls", expect=["http://127.0.0.1:8102"]
    ),
    "generator.override_existing_update_group": Effect(REMOTE_ENGINES, "disable", "sync"),
    "generator.remote_inference_engine_api_key": Effect(REMOTE_ENGINES, "sk-remote", "api_keys", expect=["sk-remote"]),
    "generator.remote_inference_engine_control_token": Effect(
        REMOTE_ENGINES, "ctl-remote", "control_tokens", expect=["ctl-remote"]
    ),
    "generator.model_name": Effect(REMOTE_ENGINES, "served-policy", "model_names", expect=["served-policy"]),
    "generator.model_dtype": Effect(VLLM_ARGS, "float32", "engine_args", slow=_VLLM),
    "generator.num_inference_engines": Effect(VLLM_ARGS, "2", "engines", expect=2, slow=_VLLM),
    "generator.inference_engine_tensor_parallel_size": Effect(REMOTE_ENGINES, "2", "weight_sync_ranks", expect=2),
    "generator.inference_engine_pipeline_parallel_size": Effect(REMOTE_ENGINES, "3", "weight_sync_ranks", expect=3),
    "generator.inference_engine_expert_parallel_size": Refused("2"),
    "generator.inference_engine_data_parallel_size": Effect(REMOTE_ENGINES, "2", "weight_sync_ranks", expect=2),
    "generator.weight_sync_backend": Effect(REMOTE_ENGINES, "nccl", "sync"),
    "generator.weight_transfer_threshold_cuda_ipc_GB": Effect(VLLM_ARGS, "0.25", "weight_sync", CUDA_IPC, slow=_VLLM),
    "generator.vllm_v1_disable_multiproc": Refused("false"),
    "generator.enable_chunked_prefill": Effect(VLLM_ARGS, "false", "engine_args", slow=_VLLM),
    "generator.max_num_batched_tokens": Effect(VLLM_ARGS, "1024", "engine_args", slow=_VLLM),
    "generator.enforce_eager": Effect(VLLM_ARGS, "false", "engine_args", slow=_VLLM),
    "generator.fully_sharded_loras": Effect(VLLM_ARGS, "true", "engine_args", where(POLICY_LORA), slow=_VLLM),
    "generator.enable_ray_prometheus_stats": Refused("true"),
    "generator.gpu_memory_utilization": Effect(VLLM_ARGS, "0.5", "engine_args", slow=_VLLM),
    "generator.engine_init_kwargs": Effect(VLLM_ARGS, "{max_model_len: 512}", "engine_args", slow=_VLLM),
    "generator.rope_scaling": Refused("{rope_type: linear, factor: 2.0}"),
    "generator.rope_theta": Refused("500000.0"),
    "generator.async_engine": Refused("false"),
    "generator.batched": Effect(TRAIN_GENERATION, "true", "rewards"),
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


def _rows(kind: type) -> list[tuple[str, Any]]:
    return [(key, row) for key, row in ROWS.items() if isinstance(row, kind)]


def _effects() -> list[tuple[str, Effect]]:
    """Every effect to show, by the key it sets: the `Effect` rows and the concrete key of each `Open` row."""
    effects = _rows(Effect)
    effects += [(key.replace(OPEN_KEY, row.name), row.effect) for key, row in _rows(Open)]
    return effects


def _setting(key: str, value: str) -> str:
    """The override setting `key`: `+` adds the concrete key of an open block."""
    return f"{key}={value}" if key in ROWS else f"+{key}={value}"


class Observations:
    """Probe reads cached per (probe, settings) for the module: the rows sharing a probe and `where` share the read of
    their default."""

    def __init__(self, root: Path):
        self.root = root
        self.cache: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}

    def read(self, probe: Probe, settings: tuple[str, ...]) -> dict[str, Any]:
        key = (probe.name, settings)
        if key not in self.cache:
            self.cache[key] = observe(probe, settings, self.root / f"read{len(self.cache)}")
        return self.cache[key]


@pytest.fixture(scope="module")
def observations(tmp_path_factory) -> Observations:
    return Observations(tmp_path_factory.mktemp("every_key"))


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


@pytest.mark.parametrize("key, row", _effects(), ids=[key for key, _ in _effects()])
def test_setting_the_key_changes_what_the_run_builds_or_does(key, row, observations):
    default = observations.read(row.probe, row.where)[row.reads]
    changed = observations.read(row.probe, (*row.where, *row.together, _setting(key, row.value)))[row.reads]
    assert changed != default, f"{key}={row.value} left {row.reads!r} of {row.probe.name!r} at {default!r}"
    if row.expect is not UNCHECKED:
        assert changed == row.expect


_PROBES = {row.probe.name: row.probe for _, row in _effects()}


@pytest.mark.parametrize("probe", _PROBES.values(), ids=list(_PROBES))
def test_a_probe_reads_the_same_config_the_same_way(probe, observations, tmp_path):
    """A probe that read different values for one config would make every row on it pass."""
    assert observe(probe, (), tmp_path) == observations.read(probe, ())


def _refused_where_inert() -> list[tuple[str, Effect]]:
    """Effect rows of `support.CONDITIONAL` keys whose condition does not hold in the base config."""
    base = config_for(WORKERS, (), Path("/nonexistent"))
    inert = {key for group in CONDITIONAL if not group.applies(base) for key in group.keys}
    return [
        (key, row)
        for key, row in _rows(Effect)
        if key in inert and _parsed(row.value) != default_of(key, base)  # a probe's base may set another value
    ]


def _parsed(value: str) -> Any:
    """An override value as YAML reads it; a value naming `{workdir}` or a tiny model stays a string."""
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


@pytest.mark.parametrize("key, row", _refused_where_inert(), ids=[key for key, _ in _refused_where_inert()])
def test_a_conditional_key_is_refused_where_it_has_no_effect(key, row):
    with pytest.raises(ConfigError) as error:
        config_for(WORKERS, (*row.together, _setting(key, row.value)), Path("/nonexistent"))
    assert any(
        p.startswith(f"{key}=") and "has no effect in this config" in p for p in error.value.problems
    ), error.value.problems


@pytest.mark.parametrize("key, row", _rows(Open), ids=[key for key, _ in _rows(Open)])
def test_an_open_block_refuses_keys_nothing_reads(key, row):
    name = row.refused or "no_such_key"
    extra = key.replace(OPEN_KEY, name)
    with pytest.raises(ConfigError) as error:
        load_config([f"+{extra}=1"])
    assert any(p.startswith(extra) or f"'{extra}'" in p for p in error.value.problems), error.value.problems
