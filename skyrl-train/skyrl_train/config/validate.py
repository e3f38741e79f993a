"""Every cross-key rule of the config, in one place: `validate_cfg(cfg)`.

Rules follow upstream SkyRL's `validate_cfg` / `validate_generator_cfg` / `validate_batch_sizes` (except that remote
engines may return logprobs: ours and vLLM's servers do). Keys that nothing here reads, or that the configured parts
do not read, are refused unless at their default, by the tables in `support.py`; the per-env blocks of
`environment.skyrl_gym` are checked against the registered envs (`env_blocks.py`); names (LR schedulers, dtypes,
estimators, losses, reductions, LoRA inits) against what exists. All problems are collected and raised together as
one `ConfigError`, each naming its key(s). On success derived keys are filled in: `trainer.algorithm.max_seq_len` (if
null, with the `seq_mean_token_sum_norm` reduction, the only one that reads it) and `trainer.resume_mode` (null ->
"none"). Before any check the deprecated `trainer.algorithm.use_tis` is mapped onto `off_policy_correction` as
upstream does (with a warning), and asynchronous training (`trainer.fully_async.max_staleness_steps > 0`) with no
off-policy rule set gets token TIS unless `trainer.fully_async.default_correction=false`.
"""

from __future__ import annotations

import re
import warnings

from skyrl_train.config.env_blocks import env_block_problems
from skyrl_train.config.errors import ConfigError
from skyrl_train.config.registries import AdvantageEstimatorRegistry, PolicyLossRegistry
from skyrl_train.config.schema import STRATEGIES, SkyRLConfig
from skyrl_train.config.support import engines_receive_weights, not_implemented_problems
from skyrl_train.utils.device import check_device_name

__all__ = [
    "validate_cfg",
    "policy_dp_size",
    "critic_dp_size",
    "STRATEGIES",
    "BACKENDS",
    "LOGGERS",
    "LOSS_REDUCTIONS",
    "KL_ESTIMATORS",
    "VLLM_DTYPES",
    "LORA_INIT_METHODS",
    "UNDRIVEN_SCHEDULERS",
    "RESUME_MODES",
    "SFT_TRUNCATIONS",
    "SFT_TRAIN_ON",
    "WARM_START_REFERENCES",
]

BACKENDS = ("hf", "vllm")
LOGGERS = ("console", "jsonl", "tensorboard", "wandb", "mlflow")
LOSS_REDUCTIONS = ("token_mean", "sequence_mean", "seq_mean_token_sum_norm")
"""`algorithms.reductions.LossReduction` (a test checks they are the same)."""
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
"""`algorithms.kl.KLEstimator` (a test checks they are the same)."""
VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
"""vLLM's `dtype` engine argument choices (`generator.model_dtype`)."""
LORA_INIT_METHODS = ("kaiming", "gaussian", "pissa", "olora", "orthogonal")
"""`model.lora.init_method`: kaiming (peft's default init) or a peft `init_lora_weights` name that needs no extra
setup step (eva, corda and loftq do), plus pissa's fast form `pissa_niter_<n>`."""
_PISSA_NITER = re.compile(r"pissa_niter_[1-9][0-9]*")
UNDRIVEN_SCHEDULERS = {
    "reduce_lr_on_plateau": "its step needs a metric, and the trainer steps the scheduler without one",
    "greedy": "its step needs a metric, and the trainer steps the scheduler without one",
    "cosine_with_min_lr": "it needs min_lr or min_lr_rate, which no config key sets",
    "cosine_warmup_with_min_lr": "it needs min_lr or min_lr_rate, which no config key sets",
    "warmup_stable_decay": "it needs num_decay_steps, which no config key sets",
}
"""transformers LR schedulers the trainer cannot drive: it builds them with `get_scheduler(name, optimizer,
num_warmup_steps, num_training_steps)` and calls `step()` after each optimizer step."""
RESUME_MODES = ("none", "latest", "from_path")
SFT_TRUNCATIONS = ("error", "truncate")
"""`sft.truncation` (`skyrl_train.sft.encoding.Truncation`; a test checks they are the same)."""
SFT_TRAIN_ON = ("all_assistant_messages", "last_assistant_message")
"""`sft.train_on_what` (`skyrl_train.sft.encoding.TrainOn`; a test checks they are the same)."""
WARM_START_REFERENCES = ("warm_start", "base")
FOLDABLE_LORA_INITS = ("kaiming", "gaussian")
"""LoRA inits that re-draw an adapter in place (peft's `reset_lora_parameters`), as a warm-start fold needs."""
_REMOTE_URL = re.compile(r"(https?://)?[^\s/:]+:\d+(/v1)?/?")
_UNSUPPORTED = {
    "trainer.strategy": {"megatron": "use fsdp2", "fsdp": "FSDP1 is not ported; use fsdp2", "deepspeed": "use fsdp2"},
    "generator.backend": {"sglang": "use vllm (GPU) or hf"},
}


def validate_cfg(cfg: SkyRLConfig, *, check_registrations: bool = True) -> None:
    """Check every rule; raise one `ConfigError` listing all violations, else fill in the derived keys.

    `check_registrations=False` leaves the checks against what code registers (the per-env blocks of
    `environment.skyrl_gym`, `trainer.algorithm.advantage_estimator` and `policy_loss_type`) to a later validation in
    the process that trains: upstream's scripts may register an env or a loss in their Ray task, after the driver
    validated.
    """
    problems: list[str] = []
    _map_deprecated_use_tis(cfg, problems)
    _default_async_correction(cfg)
    problems += not_implemented_problems(cfg)
    _check_choices(cfg, problems)
    _check_generator(cfg, problems)
    _check_placement(cfg, problems)
    _check_batch_sizes(cfg, problems)
    _check_algorithm(cfg, problems)
    _check_trainer(cfg, problems)
    _check_fully_async(cfg, problems)
    _check_sft(cfg, problems)
    if check_registrations:
        _check_registries(cfg, problems)
        problems += env_block_problems(cfg)
    _check_schedulers(cfg, problems)
    if problems:
        raise ConfigError(problems)
    _derive(cfg)


def policy_dp_size(cfg: SkyRLConfig) -> int:
    """Data-parallel size of the policy: 1 for 'single', else its worker count (sequence parallelism is refused,
    so every worker is a data-parallel rank)."""
    if not cfg.trainer.distributed:
        return 1
    p = cfg.trainer.placement
    return max(1, p.policy_num_nodes * p.policy_num_gpus_per_node)


def critic_dp_size(cfg: SkyRLConfig) -> int:
    """Data-parallel size of the critic: 1 for 'single', else its worker count (as ``policy_dp_size``)."""
    if not cfg.trainer.distributed:
        return 1
    p = cfg.trainer.placement
    return max(1, p.critic_num_nodes * p.critic_num_gpus_per_node)


# ------------------------------------------------------------------------------------------- checks


def _one_of(problems: list[str], key: str, value: object, allowed: tuple) -> None:
    if value in allowed:
        return
    reason = _UNSUPPORTED.get(key, {}).get(value)
    if reason:
        problems.append(f"{key}={value!r} is not supported in this fork ({reason}); allowed: {_fmt(allowed)}.")
    else:
        problems.append(f"{key} must be one of {_fmt(allowed)}, got {value!r}.")


def _fmt(values: tuple) -> str:
    return ", ".join("null" if v is None else repr(v) for v in values)


def _at_least(problems: list[str], key: str, value: float, minimum: float) -> None:
    if value < minimum:
        problems.append(f"{key} must be >= {minimum}, got {value}.")


def _check_choices(cfg: SkyRLConfig, problems: list[str]) -> None:
    t, g, a = cfg.trainer, cfg.generator, cfg.trainer.algorithm
    _one_of(problems, "trainer.strategy", t.strategy, STRATEGIES)
    _one_of(problems, "generator.backend", g.backend, BACKENDS)
    backends = [t.logger] if isinstance(t.logger, str) else list(t.logger)
    for name in backends:
        if name not in LOGGERS:
            problems.append(f"trainer.logger: unknown backend {name!r}; allowed: {_fmt(LOGGERS)}.")
    _one_of(problems, "trainer.resume_mode", t.resume_mode, (None, *RESUME_MODES))
    _one_of(problems, "trainer.algorithm.loss_reduction", a.loss_reduction, LOSS_REDUCTIONS)
    _one_of(problems, "trainer.algorithm.kl_estimator_type", a.kl_estimator_type, KL_ESTIMATORS)
    _one_of(problems, "generator.model_dtype", g.model_dtype, VLLM_DTYPES)
    for role in ("policy", "critic"):
        init_method = getattr(t, role).model.lora.init_method
        if not _PISSA_NITER.fullmatch(str(init_method)):
            _one_of(problems, f"trainer.{role}.model.lora.init_method", init_method, LORA_INIT_METHODS)
    _one_of(problems, "trainer.algorithm.kl_ctrl.type", a.kl_ctrl.type, ("fixed", "adaptive"))
    opc = a.off_policy_correction
    _one_of(
        problems,
        "trainer.algorithm.off_policy_correction.tis_ratio_type",
        opc.tis_ratio_type,
        (None, "token", "sequence"),
    )
    _one_of(
        problems,
        "trainer.algorithm.off_policy_correction.sequence_mask_metric",
        opc.sequence_mask_metric,
        (None, "product", "geometric"),
    )
    _one_of(problems, "trainer.algorithm.dynamic_sampling.type", a.dynamic_sampling.type, (None, "filter", "replace"))
    _one_of(problems, "generator.weight_sync_backend", g.weight_sync_backend, ("nccl", "gloo"))
    _one_of(
        problems,
        "generator.override_existing_update_group",
        g.override_existing_update_group,
        ("auto", "enable", "disable"),
    )
    _one_of(problems, "generator.chat_template.source", g.chat_template.source, ("name", "file"))


def _check_generator(cfg: SkyRLConfig, problems: list[str]) -> None:
    g, t = cfg.generator, cfg.trainer
    _at_least(problems, "generator.max_turns", g.max_turns, 1)
    _at_least(problems, "generator.prefix_cache_bytes", g.prefix_cache_bytes, 1)
    if g.weight_transfer_threshold_cuda_ipc_GB <= 0:
        problems.append(
            f"generator.weight_transfer_threshold_cuda_ipc_GB must be > 0, got {g.weight_transfer_threshold_cuda_ipc_GB}."
        )
    if g.max_turns == 1 and g.max_input_length != t.max_prompt_length:
        problems.append(
            f"generator.max_input_length ({g.max_input_length}) must equal trainer.max_prompt_length "
            f"({t.max_prompt_length}) when generator.max_turns == 1."
        )
    elif g.max_turns > 1 and g.max_input_length < t.max_prompt_length:
        problems.append(
            f"generator.max_input_length ({g.max_input_length}) must be >= trainer.max_prompt_length "
            f"({t.max_prompt_length}) for multi-turn rollouts."
        )
    if not g.run_engines_locally:
        if g.num_inference_engines != len(g.remote_inference_engine_urls):
            problems.append(
                f"generator.num_inference_engines ({g.num_inference_engines}) must equal the number of "
                f"generator.remote_inference_engine_urls ({len(g.remote_inference_engine_urls)}) for remote engines."
            )
        for url in g.remote_inference_engine_urls:
            if not _REMOTE_URL.fullmatch(str(url)):
                problems.append(
                    f"generator.remote_inference_engine_urls: {url!r} is not host:port (or http(s)://host:port)."
                )
    elif g.backend == "hf" and g.num_inference_engines != 1:
        problems.append(
            f"generator.num_inference_engines={g.num_inference_engines} with the local hf engine: it generates with "
            "the policy's own module, so there is one; use remote engines (generator.run_engines_locally=false) "
            "for more."
        )
    elif g.backend == "vllm":
        for kind in ("pipeline", "data"):
            if getattr(g, f"inference_engine_{kind}_parallel_size") > 1:
                problems.append(
                    f"generator.inference_engine_{kind}_parallel_size > 1 is not implemented for local vLLM engines "
                    "(tensor parallelism is); use more engines (generator.num_inference_engines) instead."
                )
    if g.backend == "vllm" and not g.async_engine and not g.batched:
        problems.append("generator.async_engine=false with generator.backend=vllm requires generator.batched=true.")
    if g.batched and g.max_turns != 1:
        problems.append(
            f"generator.batched=true gives one reward per single-turn response: it needs generator.max_turns=1, got "
            f"{g.max_turns}."
        )
    if g.batched and g.step_wise_trajectories:
        problems.append(
            "generator.batched=true (one reward per response) and generator.step_wise_trajectories=true (a row per "
            "turn): use one or the other."
        )
    if g.step_wise_trajectories and not g.use_conversation_multi_turn:
        problems.append(
            "generator.step_wise_trajectories=true requires generator.use_conversation_multi_turn=true: each turn is "
            "trained as its own sample, so it must be its own chat message."
        )
    if g.enable_http_endpoint and not g.async_engine:
        problems.append("generator.enable_http_endpoint=true requires generator.async_engine=true.")
    for suffix in ("tensor", "pipeline", "expert", "data"):
        key = f"inference_engine_{suffix}_parallel_size"
        _at_least(problems, f"generator.{key}", getattr(g, key), 1)
    ep, dp, tp = (
        g.inference_engine_expert_parallel_size,
        g.inference_engine_data_parallel_size,
        g.inference_engine_tensor_parallel_size,
    )
    if ep > 1 and dp * tp != ep:
        problems.append(
            f"generator.inference_engine_expert_parallel_size ({ep}) must equal inference_engine_data_parallel_size "
            f"x inference_engine_tensor_parallel_size ({dp} x {tp})."
        )
    _at_least(problems, "generator.num_inference_engines", g.num_inference_engines, 1)
    _at_least(problems, "generator.n_samples_per_prompt", g.n_samples_per_prompt, 1)
    _at_least(problems, "generator.eval_n_samples_per_prompt", g.eval_n_samples_per_prompt, 1)
    _at_least(problems, "generator.trajectory_timeout_seconds", g.trajectory_timeout_seconds, 0)
    _at_least(problems, "environment.skyrl_gym.max_env_workers", cfg.environment.skyrl_gym.max_env_workers, 0)


def _check_placement(cfg: SkyRLConfig, problems: list[str]) -> None:
    t, g, p = cfg.trainer, cfg.generator, cfg.trainer.placement
    for role in ("policy", "critic", "ref"):
        _at_least(problems, f"trainer.placement.{role}_num_nodes", getattr(p, f"{role}_num_nodes"), 1)
        _at_least(problems, f"trainer.placement.{role}_num_gpus_per_node", getattr(p, f"{role}_num_gpus_per_node"), 1)
    policy_world = p.policy_num_nodes * p.policy_num_gpus_per_node
    if t.strategy in STRATEGIES and not t.distributed and policy_world > 1:
        problems.append(
            f"trainer.strategy={t.strategy!r} runs one policy worker, but trainer.placement.policy_num_nodes x "
            f"policy_num_gpus_per_node = {policy_world}; set both to 1 or use trainer.strategy=fsdp2."
        )
    if p.colocate_all and g.run_engines_locally:
        rollout = (
            g.num_inference_engines
            * g.inference_engine_tensor_parallel_size
            * g.inference_engine_pipeline_parallel_size
            * g.inference_engine_data_parallel_size
        )
        if policy_world != rollout:
            problems.append(
                f"trainer.placement.colocate_all=true needs as many policy devices (policy_num_nodes x "
                f"policy_num_gpus_per_node = {policy_world}) as rollout devices (generator.num_inference_engines x "
                f"TP x PP x DP = {rollout})."
            )
    if p.colocate_all and g.backend == "vllm" and g.inference_engine_tensor_parallel_size > 1:
        problems.append(
            "generator.inference_engine_tensor_parallel_size > 1 with trainer.placement.colocate_all=true is not "
            "supported: a colocated vLLM engine runs on one device of the policy's placement group."
        )
    uses_ref = t.separate_ref_model
    policy_shape = (p.policy_num_nodes, p.policy_num_gpus_per_node)
    if p.colocate_policy_ref and uses_ref and policy_shape != (p.ref_num_nodes, p.ref_num_gpus_per_node):
        problems.append(
            "trainer.placement.colocate_policy_ref=true needs ref_num_nodes/ref_num_gpus_per_node equal to "
            f"policy_num_nodes/policy_num_gpus_per_node ({p.ref_num_nodes}/{p.ref_num_gpus_per_node} vs "
            f"{p.policy_num_nodes}/{p.policy_num_gpus_per_node})."
        )


def _check_batch_sizes(cfg: SkyRLConfig, problems: list[str]) -> None:
    t, n = cfg.trainer, cfg.generator.n_samples_per_prompt
    for key in (
        "train_batch_size",
        "policy_mini_batch_size",
        "critic_mini_batch_size",
        "micro_train_batch_size_per_gpu",
        "micro_forward_batch_size_per_gpu",
        "eval_batch_size",
    ):
        _at_least(problems, f"trainer.{key}", getattr(t, key), 1)
    if n < 1:
        return
    roles = [("policy", t.policy_mini_batch_size, policy_dp_size(cfg))]
    if t.critic.model.path is not None:
        roles.append(("critic", t.critic_mini_batch_size, critic_dp_size(cfg)))
    for role, mini, dp in roles:
        mini_key = f"trainer.{role}_mini_batch_size"
        if mini < 1 or t.train_batch_size < 1:
            continue
        if t.train_batch_size < mini:
            problems.append(f"trainer.train_batch_size ({t.train_batch_size}) must be >= {mini_key} ({mini}).")
            continue
        if t.train_batch_size % mini:
            problems.append(
                f"trainer.train_batch_size ({t.train_batch_size}) must be a multiple of {mini_key} ({mini})."
            )
            continue
        per_worker = mini * n // dp
        if per_worker == 0:
            problems.append(
                f"{mini_key} x generator.n_samples_per_prompt ({mini} x {n}) must be at least the {role} "
                f"data-parallel size ({dp})."
            )
            continue
        if (mini * n) % dp or (t.train_batch_size * n) % dp:
            problems.append(
                f"{mini_key} x generator.n_samples_per_prompt ({mini} x {n}) and trainer.train_batch_size x "
                f"generator.n_samples_per_prompt ({t.train_batch_size} x {n}) must be multiples of the {role} "
                f"data-parallel size ({dp}): each worker takes an equal share of the rows."
            )
            continue
        micro = t.micro_train_batch_size_per_gpu
        if micro >= 1 and per_worker % micro:
            problems.append(
                f"{role} mini-batch per worker ({mini_key} x generator.n_samples_per_prompt / dp = {per_worker}) "
                f"must be a multiple of trainer.micro_train_batch_size_per_gpu ({micro})."
            )
        if (t.train_batch_size * n // dp) % per_worker:
            problems.append(
                f"train batch per worker (trainer.train_batch_size x n / dp = {t.train_batch_size * n // dp}) must be "
                f"a multiple of the {role} mini-batch per worker ({per_worker}); check {mini_key} and the placement."
            )


def _check_algorithm(cfg: SkyRLConfig, problems: list[str]) -> None:
    a, t = cfg.trainer.algorithm, cfg.trainer
    if a.advantage_estimator == "gae" and t.critic.model.path is None:
        problems.append("trainer.algorithm.advantage_estimator='gae' needs a critic: set trainer.critic.model.path.")
    if a.use_kl_in_reward and a.use_kl_loss:
        problems.append(
            "trainer.algorithm.use_kl_in_reward and trainer.algorithm.use_kl_loss are mutually exclusive; "
            "set one of them to false."
        )
    if cfg.generator.step_wise_trajectories and t.distributed:
        problems.append(
            f"generator.step_wise_trajectories=true is not supported with trainer.strategy={t.strategy}: a step-wise "
            "batch has one row per turn, a count the data-parallel workers cannot split evenly."
        )
    if cfg.generator.step_wise_trajectories and a.advantage_estimator == "gae":
        problems.append(
            "generator.step_wise_trajectories=true gives each trajectory one advantage, broadcast to its turns; "
            "trainer.algorithm.advantage_estimator='gae' needs per-token values across turns and is not supported."
        )
    _at_least(problems, "trainer.algorithm.zero_variance_kl_rows", a.zero_variance_kl_rows, 0)
    if a.zero_variance_kl_coef is not None:
        _at_least(problems, "trainer.algorithm.zero_variance_kl_coef", a.zero_variance_kl_coef, 0)
    _at_least(problems, "trainer.algorithm.ptx_coef", a.ptx_coef, 0)
    _at_least(problems, "trainer.algorithm.ptx_batch_size", a.ptx_batch_size, 1)
    if a.ptx_coef > 0 and not t.warm_start:
        problems.append(
            "trainer.algorithm.ptx_coef > 0 trains on the warm start's conversations during RL: set trainer.warm_start="
            "true (with sft.train_data), or ptx_coef=0."
        )
    if a.ptx_coef > 0 and t.fully_async.max_staleness_steps > 0:
        problems.append(
            "trainer.algorithm.ptx_coef > 0 is not implemented with asynchronous training "
            "(trainer.fully_async.max_staleness_steps > 0): set ptx_coef=0 or max_staleness_steps=0."
        )
    ds = a.dynamic_sampling
    _at_least(problems, "trainer.algorithm.dynamic_sampling.max_sample_batches", ds.max_sample_batches, 1)
    if not 0 <= ds.min_replace_ratio <= 1:
        problems.append(
            f"trainer.algorithm.dynamic_sampling.min_replace_ratio must be in [0, 1], got {ds.min_replace_ratio}."
        )
    _check_off_policy_correction(cfg, problems)
    if a.max_seq_len is not None:
        _at_least(problems, "trainer.algorithm.max_seq_len", a.max_seq_len, 1)
    for role in ("policy", "critic"):
        lora = getattr(t, role).model.lora
        _at_least(problems, f"trainer.{role}.model.lora.rank", lora.rank, 0)


def _check_sft(cfg: SkyRLConfig, problems: list[str]) -> None:
    s, t, a = cfg.sft, cfg.trainer, cfg.trainer.algorithm
    _one_of(problems, "sft.truncation", s.truncation, SFT_TRUNCATIONS)
    _one_of(problems, "sft.train_on_what", s.train_on_what, SFT_TRAIN_ON)
    _one_of(problems, "trainer.warm_start_reference", t.warm_start_reference, WARM_START_REFERENCES)
    for key in ("max_length", "num_epochs", "batch_size"):
        _at_least(problems, f"sft.{key}", getattr(s, key), 1)
    if s.num_steps is not None:
        _at_least(problems, "sft.num_steps", s.num_steps, 1)
    if s.lr is not None and s.lr <= 0:
        problems.append(f"sft.lr must be > 0 (or null for trainer.policy.optimizer_config.lr), got {s.lr}.")
    dp = policy_dp_size(cfg)
    if s.train_data and s.batch_size % dp:  # only where SFT runs (main_sft, the warm start)
        problems.append(
            f"sft.batch_size={s.batch_size} must be a multiple of the policy's {dp} data-parallel workers (each trains an "
            "equal part of every batch)."
        )
    if t.warm_start:
        if not s.train_data:
            problems.append("trainer.warm_start=true needs conversations to fine-tune on: set sft.train_data.")
        if t.distributed:
            problems.append(
                f"trainer.warm_start=true runs with trainer.strategy=single only (the switch from the warm start to RL "
                f"is not implemented on {t.strategy}); run main_sft with fsdp2, then main_base from its export."
            )
        if not cfg.generator.use_conversation_multi_turn:
            problems.append(
                "trainer.warm_start=true trains on conversations tokenised as multi-turn chat, but "
                "generator.use_conversation_multi_turn=false generates one growing assistant message: set it to true."
            )
        lora = t.policy.model.lora
        if lora.rank > 0 and t.warm_start_reference == "warm_start":
            if engines_receive_weights(cfg):
                problems.append(
                    "trainer.warm_start_reference=warm_start folds the LoRA warm start into the policy's base weights, "
                    "which engines that receive only the adapter (vLLM, remote) never get: use the local hf engine "
                    "(generator.run_engines_locally=true, generator.backend=hf) or trainer.warm_start_reference=base."
                )
            if lora.init_method not in FOLDABLE_LORA_INITS:
                problems.append(
                    f"trainer.policy.model.lora.init_method={lora.init_method!r} cannot draw the fresh adapter RL trains "
                    f"after the warm start is folded in (trainer.warm_start_reference=warm_start): use one of "
                    f"{_fmt(FOLDABLE_LORA_INITS)}, or trainer.warm_start_reference=base."
                )
    if a.policy_loss_type == "cross_entropy":
        for key in ("use_kl_loss", "use_kl_in_reward", "use_entropy_loss"):
            if getattr(a, key):
                problems.append(
                    f"trainer.algorithm.{key}=true has no effect with trainer.algorithm.policy_loss_type=cross_entropy "
                    "(supervised: no KL or entropy term, no reward read); set it to false."
                )


def _check_off_policy_correction(cfg: SkyRLConfig, problems: list[str]) -> None:
    a = cfg.trainer.algorithm
    opc = a.off_policy_correction
    key = "trainer.algorithm.off_policy_correction"
    if opc.enabled():
        if cfg.generator.sampling_params.logprobs is None:
            problems.append(
                f"{key} corrects the loss with the inference engine's logprobs of the sampled tokens, but "
                "generator.sampling_params.logprobs=null asks the engine for none: set it to 0."
            )
        if a.policy_loss_type in ("clip_cov", "kl_cov"):
            problems.append(f"trainer.algorithm.policy_loss_type={a.policy_loss_type!r} cannot be combined with {key}.")
    if opc.tis_ratio_type == "token" and opc.token_tis_ratio_clip_high <= 0:
        problems.append(f"{key}.token_tis_ratio_clip_high must be > 0, got {opc.token_tis_ratio_clip_high}.")
    if opc.tis_ratio_type == "sequence" and opc.sequence_tis_ratio_clip_high <= 0:
        problems.append(f"{key}.sequence_tis_ratio_clip_high must be > 0, got {opc.sequence_tis_ratio_clip_high}.")
    bounds = {"geometric": ("geo_mask_low", "geo_mask_high"), "product": ("product_mask_low", "product_mask_high")}
    if opc.sequence_mask_metric in bounds:
        low, high = bounds[opc.sequence_mask_metric]
        if getattr(opc, low) > getattr(opc, high):
            problems.append(
                f"{key}.{low}={getattr(opc, low)} is above {key}.{high}={getattr(opc, high)}: "
                "every row would be masked."
            )
    low, high = opc.outlier_token_is_threshold_low, opc.outlier_token_is_threshold_high
    if high is not None and high <= 0:
        problems.append(f"{key}.outlier_token_is_threshold_high must be > 0 (ratios are positive), got {high}.")
    if low is not None and high is not None and low > high:
        problems.append(
            f"{key}.outlier_token_is_threshold_low={low} is above outlier_token_is_threshold_high={high}: every row "
            "would be masked."
        )


def _map_deprecated_use_tis(cfg: SkyRLConfig, problems: list[str]) -> None:
    """Upstream's deprecated `use_tis` / `tis_imp_ratio_cap`: token TIS with that cap (idempotent)."""
    a = cfg.trainer.algorithm
    if not a.use_tis:
        return
    opc = a.off_policy_correction
    if opc.tis_ratio_type not in (None, "token"):
        problems.append(
            f"trainer.algorithm.use_tis=true (deprecated) means token TIS, but "
            f"trainer.algorithm.off_policy_correction.tis_ratio_type={opc.tis_ratio_type!r}: set only the latter."
        )
        return
    if a.tis_imp_ratio_cap <= 0:
        problems.append(
            "trainer.algorithm.use_tis=true (deprecated) takes its cap from trainer.algorithm.tis_imp_ratio_cap, which "
            f"must be > 0, got {a.tis_imp_ratio_cap}. Better: trainer.algorithm.off_policy_correction.tis_ratio_type="
            "token and its token_tis_ratio_clip_high."
        )
        return
    warnings.warn(
        "trainer.algorithm.use_tis is deprecated: it is applied as trainer.algorithm.off_policy_correction."
        f"tis_ratio_type=token with token_tis_ratio_clip_high={a.tis_imp_ratio_cap} (trainer.algorithm."
        "tis_imp_ratio_cap); set those keys instead.",
        FutureWarning,
        stacklevel=3,
    )
    opc.tis_ratio_type = "token"
    opc.token_tis_ratio_clip_high = a.tis_imp_ratio_cap


def _check_trainer(cfg: SkyRLConfig, problems: list[str]) -> None:
    t = cfg.trainer
    device_problem = check_device_name(t.device)
    if device_problem is not None:
        problems.append(f"trainer.device {device_problem}.")
    if t.cpu_threads is not None:
        _at_least(problems, "trainer.cpu_threads", t.cpu_threads, 1)
    if t.use_sample_packing and t.distributed:
        problems.append(
            f"trainer.use_sample_packing=true runs with trainer.strategy=single only (not verified on {t.strategy})."
        )
    for key in ("eval_interval", "ckpt_interval", "hf_save_interval"):
        value = getattr(t, key)
        if value == 0 or value < -1:
            problems.append(f"trainer.{key} must be a positive number of steps or -1 (off), got {value}.")
    if t.max_ckpts_to_keep == 0 or t.max_ckpts_to_keep < -1:
        problems.append(
            f"trainer.max_ckpts_to_keep must be a positive count or -1 (keep all), got {t.max_ckpts_to_keep}."
        )
    if t.resume_mode == "from_path" and not t.resume_path:
        problems.append("trainer.resume_mode='from_path' requires trainer.resume_path (a global_step_N folder).")
    if t.push_to_hub and not t.hub_model_id:
        problems.append("trainer.push_to_hub=true requires trainer.hub_model_id (the Hub repo, e.g. 'user/name').")
    _at_least(problems, "trainer.epochs", t.epochs, 1)
    _at_least(problems, "trainer.update_epochs_per_batch", t.update_epochs_per_batch, 1)
    _at_least(problems, "trainer.max_prompt_length", t.max_prompt_length, 1)
    if not 0 <= t.max_infra_failure_ratio <= 1:
        problems.append(f"trainer.max_infra_failure_ratio must be in [0, 1], got {t.max_infra_failure_ratio}.")
    # Whether S3 is on also depends on env fallbacks (S3_CHECKPOINT_BUCKET); `storage.S3Settings` decides that.
    s3 = t.s3
    _at_least(problems, "trainer.s3.upload_attempts", s3.upload_attempts, 1)
    if s3.flush_timeout_seconds < 0:
        problems.append(f"trainer.s3.flush_timeout_seconds must be >= 0, got {s3.flush_timeout_seconds}.")
    if s3.keep_local < -1:
        problems.append(f"trainer.s3.keep_local must be >= 0 or -1 (keep all), got {s3.keep_local}.")
    if s3.keep_remote == 0 or s3.keep_remote < -1:
        problems.append(f"trainer.s3.keep_remote must be a positive count or -1 (keep all), got {s3.keep_remote}.")


def _default_async_correction(cfg: SkyRLConfig) -> None:
    """Asynchronous rows come from older weights than the ones trained: with `fully_async.default_correction` and no
    off-policy rule set, token TIS (with `token_tis_ratio_clip_high`) corrects the loss by the ratio of the trained
    policy's logprobs to the rollout's, the behaviour policy's (idempotent)."""
    t, opc = cfg.trainer, cfg.trainer.algorithm.off_policy_correction
    if t.fully_async.max_staleness_steps > 0 and t.fully_async.default_correction and not opc.enabled():
        opc.tis_ratio_type = "token"


def _check_fully_async(cfg: SkyRLConfig, problems: list[str]) -> None:
    """Asynchronous training needs engines that generate while the policy trains and take weight syncs while they
    generate; that is remote engines (`python -m skyrl_train.serve` holds new requests while a sync is applied)."""
    t, g, key = cfg.trainer, cfg.generator, "trainer.fully_async.max_staleness_steps"
    k = t.fully_async.max_staleness_steps
    _at_least(problems, key, k, 0)
    _at_least(
        problems,
        "trainer.fully_async.num_parallel_generation_workers",
        t.fully_async.num_parallel_generation_workers,
        1,
    )
    if k <= 0:
        return
    if g.run_engines_locally and g.backend == "hf":
        problems.append(
            f"{key}={k} needs engines that generate while the policy trains, but the local hf engine generates with "
            "the policy's own module in this process (it would read half-updated weights): use remote engines "
            "(generator.run_engines_locally=false, e.g. python -m skyrl_train.serve)."
        )
    elif g.run_engines_locally and t.placement.colocate_all:
        problems.append(
            f"{key}={k} needs engines that generate while the policy trains, but colocated vLLM engines "
            "(trainer.placement.colocate_all=true) sleep while it trains: use remote engines "
            "(generator.run_engines_locally=false)."
        )
    elif g.run_engines_locally:
        problems.append(
            f"{key}={k} syncs weights while the engines generate, and a local vLLM engine would apply the update "
            "between the tokens of the requests it is generating (it holds no request back during an update, as "
            "python -m skyrl_train.serve does): use remote engines (generator.run_engines_locally=false)."
        )
    if t.algorithm.dynamic_sampling.type is not None:
        problems.append(
            f"{key}={k} trains prompt groups as they finish, while trainer.algorithm.dynamic_sampling.type="
            f"{t.algorithm.dynamic_sampling.type!r} draws whole prompt batches per step: use one or the other."
        )
    if g.enable_http_endpoint:
        problems.append(
            f"{key}={k} generates without phases, while generator.enable_http_endpoint=true serves the policy only "
            "during the trainer's generation phases: use one or the other."
        )


def _check_registries(cfg: SkyRLConfig, problems: list[str]) -> None:
    # Listing a registry imports its built-ins (skyrl_train.algorithms, torch) by name, here and not on import.
    a = cfg.trainer.algorithm
    checks = (
        ("trainer.algorithm.advantage_estimator", a.advantage_estimator, AdvantageEstimatorRegistry.list_available()),
        ("trainer.algorithm.policy_loss_type", a.policy_loss_type, PolicyLossRegistry.list_available()),
    )
    for key, name, available in checks:
        if name not in available:
            problems.append(f"{key}={name!r} is not registered; available: {', '.join(sorted(available))}.")


def _check_schedulers(cfg: SkyRLConfig, problems: list[str]) -> None:
    # Imported when called (it imports torch): `import skyrl_train.config` stays light.
    from transformers.trainer_utils import SchedulerType

    usable = tuple(s.value for s in SchedulerType if s.value not in UNDRIVEN_SCHEDULERS)
    for role in ("policy", "critic"):
        key = f"trainer.{role}.optimizer_config.scheduler"
        name = getattr(cfg.trainer, role).optimizer_config.scheduler
        if name in UNDRIVEN_SCHEDULERS:
            problems.append(f"{key}={name!r} cannot be used: {UNDRIVEN_SCHEDULERS[name]}; usable: {_fmt(usable)}.")
        elif name not in usable:
            problems.append(f"{key}={name!r} is not a transformers LR scheduler; usable: {_fmt(usable)}.")


# ------------------------------------------------------------------------------------ normalising


def _derive(cfg: SkyRLConfig) -> None:
    g, t = cfg.generator, cfg.trainer
    if t.algorithm.max_seq_len is None and t.algorithm.loss_reduction == "seq_mean_token_sum_norm":
        t.algorithm.max_seq_len = g.max_input_length + g.sampling_params.max_generate_length
    if t.resume_mode is None:
        t.resume_mode = "none"
