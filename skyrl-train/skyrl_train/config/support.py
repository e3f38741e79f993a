"""Settings that would do nothing, refused: keys not implemented in this fork, and keys inert in the config at hand.

A key in `NOT_IMPLEMENTED` (declared with upstream's name and default, read by nothing here) is accepted only at its
default; any other value makes `validate_cfg` raise a `ConfigError` that names the key and says it is not
implemented, instead of being silently ignored.

`CONDITIONAL` is the ONE table of inert combinations: each entry names keys that take effect only when a condition
holds (`trainer.algorithm.kl_loss_coef` only with a KL term, the LoRA settings only with `rank > 0`, eval sampling
only with eval data, ...); where it does not hold, a value other than the default is refused with the condition that
would make it count. An entry may name the field that collects an open block's undeclared keys
(`generator.eval_sampling_params.additional_kwargs`): each undeclared key is then refused by its own name.

The default is the schema's; a default that is an interpolation (`${trainer.rope_scaling}`) means the value of
the key it points to in the same config. `config_reference.md` marks every key of both tables.

Implementing a key = deleting its entry here and making its row in `tests/config/test_every_key.py` an `Effect`:
a probe run with the key set that reads a difference in what the run builds or does.

The open blocks follow the same rule: keys of `generator.sampling_params` / `eval_sampling_params` beyond the
declared ones go to the inference engine unchanged, so only those the configured backend reads are accepted
(`ENGINE_EXTRA_SAMPLING_KEYS`); per-env blocks of `environment.skyrl_gym` are checked against the registered envs and
the config keys each declares (`env_blocks.py`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from skyrl_train.config.schema import SamplingParams, SkyRLConfig, extra_keys_field
from skyrl_train.types.sampling import ENGINE_EXTRA_SAMPLING_KEYS
from skyrl_train.utils.redact import redact_secrets

__all__ = [
    "NOT_IMPLEMENTED",
    "FSDP2_ONLY",
    "VLLM_ONLY",
    "VLLM_LORA_ONLY",
    "uses_vllm",
    "CRITIC_ONLY",
    "SEPARATE_REF_ONLY",
    "KL_IN_REWARD_ONLY",
    "REMOTE_ENGINES_ONLY",
    "LOCAL_ENGINES_ONLY",
    "WEIGHT_SYNC_ONLY",
    "LORA_SYNC_ONLY",
    "engines_receive_weights",
    "CONDITIONAL",
    "Conditional",
    "conditional_mark",
    "has_critic",
    "separate_ref_model",
    "ENGINE_EXTRA_SAMPLING_KEYS",
    "default_of",
    "value_of",
    "not_implemented_problems",
    "ADVANTAGE_ESTIMATOR_KEYS",
    "POLICY_LOSS_KEYS",
    "LORA_ONLY_KEYS",
    "EVAL_ONLY",
    "SFT_ONLY",
    "HTTP_ENDPOINT_ONLY",
    "SCHEDULERS_WITHOUT_WARMUP",
]

_CPU_OFFLOAD = (
    "FSDP2 CPU offload only applies to GPU ranks, and no test here runs on a GPU, so it is not offered unverified"
)
_ENGINES = (
    "the engines that run are the local hf engine (the policy's own weights), local vLLM engines (tensor "
    "parallelism only) and remote servers; expert parallelism, Ray Prometheus stats and engine-side RoPE overrides "
    "are not implemented"
)
_NO_LOSS = "no built-in policy loss reads it ({} is not implemented); register a custom policy loss instead"

NOT_IMPLEMENTED: dict[str, str] = {
    # --- scale-out (Ray / FSDP2)
    "trainer.policy.fsdp_config.cpu_offload": _CPU_OFFLOAD,
    "trainer.ref.fsdp_config.cpu_offload": _CPU_OFFLOAD,
    "trainer.critic.fsdp_config.cpu_offload": _CPU_OFFLOAD,
    "trainer.policy.optimizer_config.offload_after_step": "optimizer state is never offloaded to CPU",
    "trainer.critic.optimizer_config.offload_after_step": "optimizer state is never offloaded to CPU",
    "trainer.sequence_parallel_backend": "sequence parallelism is not implemented",
    "trainer.policy.sequence_parallel_size": "sequence parallelism is not implemented",
    "trainer.ref.sequence_parallel_size": "sequence parallelism is not implemented",
    "trainer.critic.sequence_parallel_size": "sequence parallelism is not implemented",
    # --- training forward pass and models
    "trainer.flash_attn": "the models load with transformers' default attention; flash-attn is not wired in",
    "trainer.policy.use_torch_compile": "the policy forward is not compiled",
    "trainer.policy.record_memory": "CUDA memory snapshots are not recorded",
    "trainer.disable_fast_tokenizer": "the tokenizer always loads with transformers' default (fast when available)",
    "trainer.update_ref_every_epoch": "the ref model is never updated from the policy",
    "trainer.rope_scaling": "RoPE settings are not applied to the model config",
    "trainer.rope_theta": "RoPE settings are not applied to the model config",
    "trainer.critic.model.lora.lora_sync_path": "the critic's weights are never sent to an inference engine",
    # --- algorithm
    "trainer.algorithm.sapo.tau_pos": _NO_LOSS.format("the sapo loss"),
    "trainer.algorithm.sapo.tau_neg": _NO_LOSS.format("the sapo loss"),
    "trainer.algorithm.clip_cov.clip_ratio": _NO_LOSS.format("the clip_cov loss"),
    "trainer.algorithm.clip_cov.clip_cov_lb": _NO_LOSS.format("the clip_cov loss"),
    "trainer.algorithm.clip_cov.clip_cov_ub": _NO_LOSS.format("the clip_cov loss"),
    "trainer.algorithm.kl_cov.kl_cov_frac": _NO_LOSS.format("the kl_cov loss"),
    "trainer.algorithm.kl_cov.ppo_kl_coef": _NO_LOSS.format("the kl_cov loss"),
    "trainer.algorithm.cispo.cispo_eps_clip_low": _NO_LOSS.format("the cispo loss"),
    "trainer.algorithm.cispo.cispo_eps_clip_high": _NO_LOSS.format("the cispo loss"),
    # --- inference engines
    "generator.inference_engine_expert_parallel_size": _ENGINES,
    "generator.enable_ray_prometheus_stats": _ENGINES,
    "generator.rope_scaling": _ENGINES,
    "generator.rope_theta": _ENGINES,
    "generator.vllm_v1_disable_multiproc": (
        "vLLM's async engine (AsyncLLM, the only one the engines use) runs its engine core in a child process "
        "whatever VLLM_ENABLE_V1_MULTIPROCESSING says (vLLM 0.32 reads it only in the synchronous LLMEngine)"
    ),
    "generator.async_engine": "the hf engine is always async (the agent loop needs it); a sync engine does not exist",
    "generator.chat_template.source": "custom chat templates (the re-tokenising path) are not implemented",
    "generator.chat_template.name_or_path": "custom chat templates (the re-tokenising path) are not implemented",
}

_INTERPOLATION = re.compile(r"\$\{([A-Za-z0-9_.]+)\}")


def value_of(cfg: Any, key: str) -> Any:
    """The value of dotted `key` in a config (or a default block tree)."""
    node = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


def default_of(key: str, cfg: SkyRLConfig) -> Any:
    """The schema default of `key`; an interpolation default is the value of the key it names in `cfg`."""
    section, _, rest = key.partition(".")
    field = {f.name: f for f in dataclasses.fields(SkyRLConfig)}[section]
    default = value_of(field.default_factory(), rest)
    match = _INTERPOLATION.fullmatch(default) if isinstance(default, str) else None
    return value_of(cfg, match.group(1)) if match else default


FSDP2_ONLY: tuple[str, ...] = (
    "trainer.placement.colocate_policy_ref",
    *(
        f"trainer.placement.{role}_{key}"
        for role in ("policy", "ref", "critic")
        for key in ("num_nodes", "num_gpus_per_node")
    ),
    *(
        f"trainer.{role}.fsdp_config.{key}"
        for role in ("policy", "ref", "critic")
        for key in ("reshard_after_forward", "fsdp_size")
    ),
)
"""Keys only ``trainer.strategy=fsdp2`` reads (placement, sharding): with ``single`` only their defaults are
accepted."""

CRITIC_ONLY: tuple[str, ...] = (
    "trainer.critic_mini_batch_size",
    "trainer.algorithm.value_clip",
    "trainer.algorithm.value_head_prefix",
    "trainer.placement.critic_num_nodes",
    "trainer.placement.critic_num_gpus_per_node",
    *(f"trainer.critic.fsdp_config.{key}" for key in ("reshard_after_forward", "fsdp_size")),
    "trainer.critic.model_config_kwargs",
    *(f"trainer.critic.model.lora.{key}" for key in ("rank", "alpha", "dropout", "target_modules", "exclude_modules")),
    "trainer.critic.model.lora.init_method",
    *(
        f"trainer.critic.optimizer_config.{key}"
        for key in ("lr", "adam_betas", "weight_decay", "max_grad_norm", "num_warmup_steps", "scheduler")
    ),
)
"""Keys only a critic reads: without ``trainer.critic.model.path`` only their defaults are accepted."""

SEPARATE_REF_ONLY: tuple[str, ...] = (
    "trainer.ref.model.path",
    "trainer.ref.model_config_kwargs",
    "trainer.placement.ref_num_nodes",
    "trainer.placement.ref_num_gpus_per_node",
    *(f"trainer.ref.fsdp_config.{key}" for key in ("reshard_after_forward", "fsdp_size")),
)
"""Keys of a reference model of its own: read only when a KL term is on and the policy has no LoRA adapter (with
LoRA the reference is the policy with its adapter switched off, on the policy's workers)."""

VLLM_ONLY: tuple[str, ...] = tuple(
    f"generator.{key}"
    for key in (
        "model_dtype",
        "enable_chunked_prefill",
        "max_num_batched_tokens",
        "enforce_eager",
        "gpu_memory_utilization",
        "engine_init_kwargs",
    )
)
"""Keys only the vLLM engines read (``generator.backend=vllm``, local); the hf engine generates in this process with
the policy's own module, dtype and memory, and a remote server has its own settings."""

VLLM_LORA_ONLY: tuple[str, ...] = ("generator.fully_sharded_loras",)
"""Read only when vLLM engines serve a LoRA adapter."""

REMOTE_ENGINES_ONLY: tuple[str, ...] = (
    "generator.remote_inference_engine_urls",
    "generator.model_name",
    "generator.remote_inference_engine_api_key",
    "generator.remote_inference_engine_control_token",
)
"""Keys only remote engines read (the server URLs, the `model` name requests carry, the credentials they send)."""

LOCAL_ENGINES_ONLY: tuple[str, ...] = ("generator.max_num_seqs", "generator.enable_prefix_caching")
"""Keys of engines this job starts (a remote server has its own settings)."""

HF_PREFIX_CACHE_ONLY: tuple[str, ...] = ("generator.prefix_cache_bytes",)
"""Read by the hf engine this job starts, when its prefix cache is on (vLLM sizes its own KV cache)."""

WEIGHT_SYNC_ONLY: tuple[str, ...] = (
    "generator.weight_sync_backend",
    "generator.override_existing_update_group",
    *(f"generator.inference_engine_{kind}_parallel_size" for kind in ("tensor", "pipeline", "data")),
)
"""Keys of engines that receive weights from the trainer (vLLM engines, remote servers): the local hf engine shares
the policy's module, so it has no weight-update group and runs as one worker."""

LORA_SYNC_ONLY: tuple[str, ...] = ("trainer.policy.model.lora.lora_sync_path",)


def engines_receive_weights(cfg: SkyRLConfig) -> bool:
    """The engines get the policy's weights through a weight sync (anything but the local hf engine)."""
    return not (cfg.generator.run_engines_locally and cfg.generator.backend == "hf")


KL_IN_REWARD_ONLY: tuple[str, ...] = tuple(
    f"trainer.algorithm.kl_ctrl.{key}" for key in ("type", "kl_target", "horizon")
)

_OPC = "trainer.algorithm.off_policy_correction."

ADVANTAGE_ESTIMATOR_KEYS: dict[str, tuple[str, ...]] = {
    "grpo": ("grpo_norm_by_std",),
    "rloo": (),
    "reinforce++": ("gamma",),
    "gae": ("gamma", "lambd"),
}
"""Which of `trainer.algorithm.{gamma, lambd, grpo_norm_by_std}` each built-in advantage estimator reads
(`algorithms.advantages`). The trainer passes all three to every estimator, so a custom one may read any of them."""

POLICY_LOSS_KEYS: dict[str, tuple[str, ...]] = {
    "regular": (),
    "dual_clip": ("clip_ratio_c",),
    "gspo": (),
    "cross_entropy": (),
}
"""Which loss-specific keys (`trainer.algorithm.clip_ratio_c`) each built-in policy loss reads
(`algorithms.policy_losses`). A custom loss is passed the whole `trainer.algorithm` section."""

LORA_ONLY_KEYS: tuple[str, ...] = ("alpha", "dropout", "target_modules", "exclude_modules", "init_method")
"""Keys of a `model.lora` block that shape the adapter: read only when `rank > 0`."""

EVAL_ONLY: tuple[str, ...] = (
    "trainer.eval_batch_size",
    "generator.eval_n_samples_per_prompt",
    *(f"generator.eval_sampling_params.{f.name}" for f in dataclasses.fields(SamplingParams)),
)
"""Read only when there is eval data (training's evals, `main_generate`). The block's `additional_kwargs` stands for
its undeclared keys."""

HTTP_ENDPOINT_ONLY: tuple[str, ...] = (
    "generator.http_endpoint_host",
    "generator.http_endpoint_port",
    "generator.served_model_name",
    "generator.http_endpoint_api_key",
)

SFT_ONLY: tuple[str, ...] = tuple(
    f"sft.{key}"
    for key in (
        "eval_data",
        "messages_key",
        "tools_key",
        "max_length",
        "truncation",
        "train_on_what",
        "num_steps",
        "batch_size",
        "lr",
    )
)
"""Keys of the SFT run (main_sft, a warm start): read only when there is something to fine-tune on."""

SCHEDULERS_WITHOUT_WARMUP: tuple[str, ...] = ("constant",)
"""LR schedulers that transformers' `get_scheduler` builds without `num_warmup_steps` (among those the trainer can
drive: `validate.UNDRIVEN_SCHEDULERS` are refused)."""


def uses_vllm(cfg: SkyRLConfig) -> bool:
    """Local vLLM engines run (remote servers are whatever they are)."""
    return cfg.generator.run_engines_locally and cfg.generator.backend == "vllm"


def syncs_by_cuda_ipc(cfg: SkyRLConfig) -> bool:
    """Full weights reach the engines by CUDA IPC (upstream's rule): no LoRA, `weight_sync_backend=nccl`, and local
    vLLM engines colocated with the policy (`trainer.placement.colocate_all`)."""
    g = cfg.generator
    return (
        cfg.trainer.policy.model.lora.rank == 0
        and g.weight_sync_backend == "nccl"
        and uses_vllm(cfg)
        and cfg.trainer.placement.colocate_all
    )


def has_critic(cfg: SkyRLConfig) -> bool:
    return cfg.trainer.critic.model.path is not None


def separate_ref_model(cfg: SkyRLConfig) -> bool:
    """A reference model is loaded on its own (and placed on its own workers with fsdp2): see
    `TrainerConfig.separate_ref_model`."""
    return cfg.trainer.separate_ref_model


@dataclasses.dataclass(frozen=True)
class Conditional:
    """Keys that take effect only when `applies(cfg)`: elsewhere only their defaults are accepted."""

    keys: tuple[str, ...]
    applies: Callable[[SkyRLConfig], bool]
    condition: str
    """When they apply, for the error message."""
    mark: str
    """Short form for the docs, e.g. "only with a critic"."""


def _read_by(kind: str, readers_of: dict[str, tuple[str, ...]], key: str) -> Conditional:
    """`trainer.algorithm.<key>`, read by the built-in `<kind>`s that list it in `readers_of` and by any custom one
    (`kind` is `advantage_estimator` or `policy_loss_type`)."""
    readers = tuple(name for name, keys in readers_of.items() if key in keys)

    def applies(cfg: SkyRLConfig) -> bool:
        chosen = getattr(cfg.trainer.algorithm, kind)
        return chosen in readers or chosen not in readers_of

    names = _or(readers)
    return Conditional(
        (f"trainer.algorithm.{key}",),
        applies,
        f"trainer.algorithm.{kind}={names} (or a custom one, which is passed it)",
        f"only with {names} (or a custom {kind})",
    )


def _lora_only(role: str) -> Conditional:
    return Conditional(
        tuple(f"trainer.{role}.model.lora.{key}" for key in LORA_ONLY_KEYS),
        lambda cfg: getattr(cfg.trainer, role).model.lora.rank > 0,
        f"a LoRA adapter (trainer.{role}.model.lora.rank > 0)",
        "only with LoRA (rank > 0)",
    )


def _warmup(role: str) -> Conditional:
    return Conditional(
        (f"trainer.{role}.optimizer_config.num_warmup_steps",),
        lambda cfg: getattr(cfg.trainer, role).optimizer_config.scheduler not in SCHEDULERS_WITHOUT_WARMUP,
        f"a scheduler that warms up (trainer.{role}.optimizer_config.scheduler not {_or(SCHEDULERS_WITHOUT_WARMUP)})",
        f"not with scheduler={_or(SCHEDULERS_WITHOUT_WARMUP)}",
    )


def _or(names: tuple[str, ...]) -> str:
    return " or ".join(names)


CONDITIONAL: tuple[Conditional, ...] = (
    Conditional(FSDP2_ONLY, lambda cfg: cfg.trainer.distributed, "trainer.strategy=fsdp2 (Ray workers)", "fsdp2 only"),
    Conditional(
        ("trainer.placement.colocate_all",),
        lambda cfg: cfg.trainer.distributed or uses_vllm(cfg),
        "trainer.strategy=fsdp2 or generator.backend=vllm (engines placed by Ray)",
        "fsdp2 or vllm only",
    ),
    Conditional(VLLM_ONLY, uses_vllm, "local vLLM engines (generator.backend=vllm)", "vllm only"),
    Conditional(
        VLLM_LORA_ONLY,
        lambda cfg: uses_vllm(cfg) and cfg.trainer.policy.model.lora.rank > 0,
        "generator.backend=vllm and a LoRA policy (trainer.policy.model.lora.rank > 0)",
        "vllm with LoRA only",
    ),
    Conditional(CRITIC_ONLY, has_critic, "a critic (trainer.critic.model.path set)", "only with a critic"),
    Conditional(
        SEPARATE_REF_ONLY,
        separate_ref_model,
        "a reference model of its own: a KL term on (use_kl_loss or use_kl_in_reward) and a policy without LoRA; "
        "with LoRA the reference is the policy with its adapter off",
        "only with a KL term and no LoRA",
    ),
    Conditional(
        REMOTE_ENGINES_ONLY,
        lambda cfg: not cfg.generator.run_engines_locally,
        "remote engines (generator.run_engines_locally=false)",
        "remote engines only",
    ),
    Conditional(
        LOCAL_ENGINES_ONLY,
        lambda cfg: cfg.generator.run_engines_locally,
        "engines this job starts (generator.run_engines_locally=true); a remote server has its own settings",
        "local engines only",
    ),
    Conditional(
        HF_PREFIX_CACHE_ONLY,
        lambda cfg: cfg.generator.run_engines_locally
        and cfg.generator.backend == "hf"
        and cfg.generator.enable_prefix_caching,
        "the local hf engine with its prefix cache on (generator.backend=hf, generator.enable_prefix_caching=true)",
        "hf engine with prefix caching only",
    ),
    Conditional(
        WEIGHT_SYNC_ONLY,
        engines_receive_weights,
        "engines that receive weights from the trainer (vLLM or remote engines; the local hf engine shares the "
        "policy)",
        "engines receiving weights only",
    ),
    Conditional(
        ("generator.weight_transfer_threshold_cuda_ipc_GB",),
        syncs_by_cuda_ipc,
        "a CUDA IPC weight sync: full fine-tuning, generator.weight_sync_backend=nccl and local vLLM engines "
        "colocated with the policy (trainer.placement.colocate_all=true)",
        "CUDA IPC weight sync only",
    ),
    Conditional(
        LORA_SYNC_ONLY,
        lambda cfg: engines_receive_weights(cfg) and cfg.trainer.policy.model.lora.rank > 0,
        "a LoRA policy whose adapter is sent to engines (LoRA with vLLM or remote engines)",
        "LoRA with vLLM or remote engines only",
    ),
    Conditional(
        ("trainer.hub_model_id",),
        lambda cfg: cfg.trainer.push_to_hub,
        "trainer.push_to_hub=true",
        "only with push_to_hub",
    ),
    Conditional(
        KL_IN_REWARD_ONLY,
        lambda cfg: cfg.trainer.algorithm.use_kl_in_reward,
        "trainer.algorithm.use_kl_in_reward=true",
        "only with use_kl_in_reward",
    ),
    Conditional(
        ("trainer.algorithm.tis_imp_ratio_cap",),
        lambda cfg: cfg.trainer.algorithm.use_tis,
        "trainer.algorithm.use_tis=true",
        "only with use_tis",
    ),
    Conditional(
        (_OPC + "token_tis_ratio_clip_high",),
        lambda cfg: cfg.trainer.algorithm.off_policy_correction.tis_ratio_type == "token",
        f"{_OPC}tis_ratio_type=token",
        "only with tis_ratio_type=token",
    ),
    Conditional(
        (_OPC + "sequence_tis_ratio_clip_high",),
        lambda cfg: cfg.trainer.algorithm.off_policy_correction.tis_ratio_type == "sequence",
        f"{_OPC}tis_ratio_type=sequence",
        "only with tis_ratio_type=sequence",
    ),
    Conditional(
        (_OPC + "geo_mask_high", _OPC + "geo_mask_low"),
        lambda cfg: cfg.trainer.algorithm.off_policy_correction.sequence_mask_metric == "geometric",
        f"{_OPC}sequence_mask_metric=geometric",
        "only with sequence_mask_metric=geometric",
    ),
    Conditional(
        (_OPC + "product_mask_high", _OPC + "product_mask_low"),
        lambda cfg: cfg.trainer.algorithm.off_policy_correction.sequence_mask_metric == "product",
        f"{_OPC}sequence_mask_metric=product",
        "only with sequence_mask_metric=product",
    ),
    Conditional(
        ("trainer.algorithm.kl_loss_coef", "trainer.algorithm.kl_estimator_type"),
        lambda cfg: cfg.trainer.needs_ref,
        "a KL term: trainer.algorithm.use_kl_loss=true, or use_kl_in_reward=true (kl_loss_coef is then the KL "
        "controller's initial coefficient)",
        "only with a KL term",
    ),
    Conditional(
        ("trainer.algorithm.zero_variance_kl_rows",),
        lambda cfg: cfg.trainer.algorithm.zero_variance_filter and cfg.trainer.algorithm.use_kl_loss,
        "trainer.algorithm.zero_variance_filter=true and trainer.algorithm.use_kl_loss=true",
        "only with zero_variance_filter and use_kl_loss",
    ),
    Conditional(
        ("trainer.algorithm.zero_variance_kl_coef",),
        lambda cfg: cfg.trainer.algorithm.zero_variance_kl_rows > 0 and cfg.trainer.algorithm.use_kl_loss,
        "trainer.algorithm.zero_variance_kl_rows > 0 (with zero_variance_filter and use_kl_loss)",
        "only with zero_variance_kl_rows",
    ),
    Conditional(
        ("trainer.algorithm.ptx_batch_size",),
        lambda cfg: cfg.trainer.algorithm.ptx_coef > 0,
        "trainer.algorithm.ptx_coef > 0 (with trainer.warm_start=true)",
        "only with ptx_coef",
    ),
    Conditional(
        ("trainer.algorithm.hinted_rows_positive_only",),
        lambda cfg: cfg.generator.train_without_hints,
        "generator.train_without_hints=true",
        "only with train_without_hints",
    ),
    Conditional(
        ("trainer.algorithm.kl_ctrl.kl_target", "trainer.algorithm.kl_ctrl.horizon"),
        lambda cfg: cfg.trainer.algorithm.kl_ctrl.type == "adaptive",
        "trainer.algorithm.kl_ctrl.type=adaptive",
        "only with kl_ctrl.type=adaptive",
    ),
    Conditional(
        ("trainer.algorithm.entropy_loss_coef",),
        lambda cfg: cfg.trainer.algorithm.use_entropy_loss,
        "trainer.algorithm.use_entropy_loss=true",
        "only with use_entropy_loss",
    ),
    *(_read_by("advantage_estimator", ADVANTAGE_ESTIMATOR_KEYS, key) for key in ("gamma", "lambd", "grpo_norm_by_std")),
    _read_by("policy_loss_type", POLICY_LOSS_KEYS, "clip_ratio_c"),
    Conditional(
        ("trainer.algorithm.max_seq_len",),
        lambda cfg: cfg.trainer.algorithm.loss_reduction == "seq_mean_token_sum_norm",
        "trainer.algorithm.loss_reduction=seq_mean_token_sum_norm",
        "only with seq_mean_token_sum_norm",
    ),
    Conditional(
        ("trainer.algorithm.dynamic_sampling.max_sample_batches",),
        lambda cfg: cfg.trainer.algorithm.dynamic_sampling.type is not None,
        "dynamic sampling on (trainer.algorithm.dynamic_sampling.type=filter or replace)",
        "only with dynamic sampling",
    ),
    Conditional(
        ("trainer.algorithm.dynamic_sampling.min_replace_ratio",),
        lambda cfg: cfg.trainer.algorithm.dynamic_sampling.type == "replace",
        "trainer.algorithm.dynamic_sampling.type=replace",
        "only with dynamic_sampling.type=replace",
    ),
    Conditional(
        ("trainer.fully_async.num_parallel_generation_workers", "trainer.fully_async.default_correction"),
        lambda cfg: cfg.trainer.fully_async.max_staleness_steps > 0,
        "asynchronous training (trainer.fully_async.max_staleness_steps > 0)",
        "only when asynchronous",
    ),
    _lora_only("policy"),
    _lora_only("critic"),
    _warmup("policy"),
    _warmup("critic"),
    Conditional(
        ("trainer.gradient_checkpointing_use_reentrant",),
        lambda cfg: cfg.trainer.gradient_checkpointing,
        "trainer.gradient_checkpointing=true",
        "only with gradient_checkpointing",
    ),
    Conditional(
        ("trainer.resume_path",),
        lambda cfg: cfg.trainer.resume_mode == "from_path",
        "trainer.resume_mode=from_path",
        "only with resume_mode=from_path",
    ),
    Conditional(
        EVAL_ONLY,
        lambda cfg: bool(cfg.data.val_data),
        "eval data (data.val_data not empty)",
        "only with eval data",
    ),
    Conditional(SFT_ONLY, lambda cfg: bool(cfg.sft.train_data), "conversations (sft.train_data not empty)", "SFT only"),
    Conditional(
        ("sft.num_epochs",),
        lambda cfg: bool(cfg.sft.train_data) and cfg.sft.num_steps is None,
        "conversations (sft.train_data not empty) and sft.num_steps=null",
        "SFT without num_steps only",
    ),
    Conditional(
        ("trainer.warm_start_reference",),
        lambda cfg: cfg.trainer.warm_start,
        "trainer.warm_start=true",
        "only with warm_start",
    ),
    Conditional(
        HTTP_ENDPOINT_ONLY,
        lambda cfg: cfg.generator.enable_http_endpoint,
        "generator.enable_http_endpoint=true",
        "only with the HTTP endpoint",
    ),
    Conditional(
        ("generator.append_eos_token_after_stop_str_in_multi_turn",),
        lambda cfg: cfg.generator.use_conversation_multi_turn,
        "generator.use_conversation_multi_turn=true (a turn ending on a stop string is then its own message)",
        "only with use_conversation_multi_turn",
    ),
)


def conditional_mark(key: str) -> str | None:
    """The docs' mark of a key of `CONDITIONAL` (the first group that has it), else None."""
    return next((group.mark for group in CONDITIONAL if key in group.keys), None)


def not_implemented_problems(cfg: SkyRLConfig) -> list[str]:
    """One problem per key set to a value that would do nothing: a key of `NOT_IMPLEMENTED`, an extra sampling key
    the engine does not read, or a key of `CONDITIONAL` set where it does not apply."""
    problems, named = [], set()
    for group in CONDITIONAL:
        if group.applies(cfg):
            continue
        for key in group.keys:
            for name, value in _set_away_from_default(cfg, key):
                if name not in named:
                    named.add(name)
                    shown = redact_secrets(value, name.split("."))
                    problems.append(
                        f"{name}={shown!r} has no effect in this config: it applies only with {group.condition}."
                    )
    for key, reason in NOT_IMPLEMENTED.items():
        value, default = value_of(cfg, key), default_of(key, cfg)
        if value != default:
            problems.append(
                f"{key}={value!r} is not implemented in this fork: {reason}. Only the default {default!r} is accepted."
            )
    backend = cfg.generator.backend
    readable = ENGINE_EXTRA_SAMPLING_KEYS.get(backend, ())
    for block in ("sampling_params", "eval_sampling_params"):
        for name in getattr(cfg.generator, block).additional_kwargs:
            if name not in readable and f"generator.{block}.{name}" not in named:
                problems.append(
                    f"generator.{block}.{name} is not implemented in this fork: the {backend} engine would ignore "
                    f"it (extra sampling keys it reads: {', '.join(readable)})."
                )
    return problems


def _set_away_from_default(cfg: SkyRLConfig, key: str) -> list[tuple[str, Any]]:
    """(name, value) of what `key` sets away from its default: the key itself, or, when `key` is the field that
    collects an open block's undeclared keys, each of those keys by the name it was set with."""
    block_key, _, name = key.rpartition(".")
    block = value_of(cfg, block_key)
    if name == extra_keys_field(type(block)):
        return [(f"{block_key}.{extra}", value) for extra, value in getattr(block, name).items()]
    value = value_of(cfg, key)
    return [] if value == default_of(key, cfg) else [(key, value)]
