"""The typed config schema: one dataclass field per config key, with its type, default and help text.

This module is the single definition of every key. `ppo_base_config.yaml` and `docs/config_reference.md`
are rendered from it (`python -m skyrl_train.config.render_yaml`), `loader.build_config` type-checks
against it, and `validate.validate_cfg` holds every cross-key rule.

Key names and defaults follow upstream SkyRL's `ppo_base_config.yaml`; the deviations are listed in
`docs/config_reference.md`. Two sections are open-ended: keys of `environment.skyrl_gym` other than
`max_env_workers` are per-env config blocks (env id -> mapping), and keys of `*sampling_params` other
than the declared ones are passed to the inference engine unchanged.
"""

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import DictConfig, OmegaConf

from skyrl_train.types.sampling import SamplingParams
from skyrl_train.utils.device import training_dtype

if TYPE_CHECKING:
    import torch

__all__ = [
    "SkyRLConfig",
    "STRATEGIES",
    "DISTRIBUTED_STRATEGIES",
    "DataConfig",
    "TrainerConfig",
    "PlacementConfig",
    "LoraConfig",
    "ModelConfig",
    "RefModelConfig",
    "OptimizerConfig",
    "FSDPConfig",
    "PolicyConfig",
    "RefConfig",
    "CriticConfig",
    "S3Config",
    "FullyAsyncConfig",
    "KLCtrlConfig",
    "OffPolicyCorrectionConfig",
    "SAPOConfig",
    "DynamicSamplingConfig",
    "ClipCovConfig",
    "KLCovConfig",
    "CISPOConfig",
    "AlgorithmConfig",
    "ChatTemplateConfig",
    "SamplingParams",
    "GeneratorConfig",
    "SkyRLGymConfig",
    "EnvironmentConfig",
    "SFTConfig",
    "knob",
    "section",
    "help_of",
    "extra_keys_field",
    "AddedKeys",
    "ADDED_KEYS_HELP",
    "to_dict",
]


def knob(default: Any, help: str) -> Any:
    """Declare one config key: its default and a one-line help text (mutable defaults are copied per instance)."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def section(factory: Any, help: str) -> Any:
    """Declare a nested block of keys, built by `factory` (a dataclass or a function returning one)."""
    return field(default_factory=factory, metadata={"help": help})


def help_of(f: dataclasses.Field) -> str:
    """The help text declared with `knob`/`section` for a dataclass field."""
    return f.metadata.get("help", "")


def extra_keys_field(cls: type) -> str | None:
    """Name of the dict field that collects undeclared keys of this block, or None if the block is closed."""
    return getattr(cls, "_extra_keys_field", None)


ADDED_KEYS_HELP = (
    "Keys added with `+` (e.g. `+trainer.algorithm.overlong_buffer.len=512`): kept for custom code (a trainer subclass, "
    "a custom generator), which reads them as attributes (`cfg.trainer.algorithm.overlong_buffer.len`) or with "
    "`get`, as upstream's DictConfig; nothing in skyrl_train reads them. A near-miss of a declared key is refused."
)


class AddedKeys:
    """Mixin of a block that keeps keys added with `+` in its `extra` field (`ADDED_KEYS_HELP`). The blocks upstream
    SkyRL's example scripts extend are `trainer.algorithm` and `generator`; a key added anywhere else is refused
    (`loader.unknown_key_message`)."""

    _extra_keys_field: ClassVar[str] = "extra"

    def __getattr__(self, name: str) -> Any:
        added = self.__dict__.get("extra")
        if name.startswith("_") or added is None or name not in added:
            raise AttributeError(f"{type(self).__name__} has no key {name!r}")
        value = added[name]
        return OmegaConf.create(copy.deepcopy(value)) if isinstance(value, dict | list) else value

    def get(self, name: str, default: Any = None) -> Any:
        """A declared or added key's value, else `default` (DictConfig's `get`, which upstream custom code calls)."""
        return getattr(self, name, default)


# ----------------------------------------------------------------------------------------------- data


@dataclass
class DataConfig:
    train_data: list[str] = knob(
        ["~/data/gsm8k/train.parquet"],
        "Training datasets: parquet/json/jsonl paths or HF ids ('name' or 'name:split').",
    )
    val_data: list[str] = knob(
        ["~/data/gsm8k/validation.parquet"], "Evaluation datasets, same forms as train_data; empty list = no eval."
    )
    balance_by: str | None = knob(
        None,
        "Row column (e.g. data_source) whose values every training batch takes in turn, so each batch holds them "
        "in equal shares; null: a plain shuffle.",
    )


# -------------------------------------------------------------------------------------------- trainer


@dataclass
class PlacementConfig:
    colocate_all: bool = knob(
        True, "Put policy, ref, critic and local vLLM engines on the same devices (engines sleep while training)."
    )
    colocate_policy_ref: bool = knob(True, "Put the policy and ref models on the same devices.")
    policy_num_nodes: int = knob(1, "Nodes for policy workers.")
    policy_num_gpus_per_node: int = knob(1, "Policy workers per node (one per GPU; on CPU, one per process).")
    critic_num_nodes: int = knob(1, "Nodes for critic workers.")
    critic_num_gpus_per_node: int = knob(1, "Critic workers per node (one per GPU; on CPU, one per process).")
    ref_num_nodes: int = knob(1, "Nodes for ref workers.")
    ref_num_gpus_per_node: int = knob(1, "Ref workers per node (one per GPU; on CPU, one per process).")


@dataclass
class LoraConfig:
    rank: int = knob(0, "LoRA rank; 0 disables LoRA (full fine-tuning).")
    alpha: int = knob(16, "LoRA alpha (scaling = alpha / rank).")
    dropout: float = knob(0.0, "Dropout on the LoRA layers.")
    lora_sync_path: str = knob(
        "/tmp/skyrl_lora_sync",
        "Folder where the adapter is written for the engines to load (remote servers must be able to read it).",
    )
    target_modules: str | list[str] = knob("all-linear", "Modules that get adapters: 'all-linear' or a list of names.")
    exclude_modules: str | list[str] | None = knob(None, "Modules excluded from target_modules (peft semantics).")
    init_method: str = knob("kaiming", "Initialisation of the LoRA A matrix.")


@dataclass
class ModelConfig:
    path: str | None = knob(None, "Local folder or HF model id to load.")
    lora: LoraConfig = section(LoraConfig, "LoRA adapter settings (peft).")


@dataclass
class RefModelConfig:
    path: str | None = knob("${trainer.policy.model.path}", "Reference model to load; defaults to the policy's.")


@dataclass
class OptimizerConfig:
    lr: float = knob(1e-6, "Peak learning rate (AdamW).")
    adam_betas: list[float] = knob([0.9, 0.999], "AdamW betas.")
    weight_decay: float = knob(1e-2, "AdamW weight decay.")
    max_grad_norm: float = knob(1.0, "Gradient clipping by global norm.")
    offload_after_step: bool = knob(False, "Offload optimizer state to CPU after each step (colocated GPU runs).")
    num_warmup_steps: int = knob(0, "Learning-rate warmup, in optimizer steps.")
    scheduler: str = knob("constant_with_warmup", "HF `get_scheduler` name; steps once per optimizer step.")


@dataclass
class FSDPConfig:
    cpu_offload: bool = knob(False, "Offload parameters to CPU (FSDP2 CPUOffloadPolicy).")
    reshard_after_forward: bool = knob(True, "Free gathered parameters after forward (FSDP2 reshard_after_forward).")
    fsdp_size: int = knob(-1, "Shard group size; -1 = all workers of the model (full sharding).")


@dataclass
class PolicyConfig:
    model: ModelConfig = section(
        lambda: ModelConfig(path="smollm2-135m-instruct"),
        "Policy model and its LoRA adapter (default: the built-in CPU model alias).",
    )
    optimizer_config: OptimizerConfig = section(OptimizerConfig, "Policy optimizer and LR schedule.")
    fsdp_config: FSDPConfig = section(FSDPConfig, "FSDP2 sharding of the policy (strategy=fsdp2).")
    sequence_parallel_size: int = knob(1, "Ulysses sequence-parallel group size.")
    use_torch_compile: bool = knob(False, "Wrap the policy forward in torch.compile.")
    record_memory: bool = knob(False, "Record CUDA memory snapshots for debugging.")
    model_config_kwargs: dict[str, Any] = knob({}, "Extra kwargs set on the HF model config before loading.")


@dataclass
class RefConfig:
    model: RefModelConfig = section(RefModelConfig, "Reference model (frozen; used for the KL term).")
    fsdp_config: FSDPConfig = section(FSDPConfig, "FSDP2 sharding of the ref model (strategy=fsdp2).")
    sequence_parallel_size: int = knob(1, "Ulysses sequence-parallel group size.")
    model_config_kwargs: dict[str, Any] = knob({}, "Extra kwargs set on the HF model config before loading.")


@dataclass
class CriticConfig:
    model: ModelConfig = section(ModelConfig, "Critic model; the critic exists only if model.path is set.")
    optimizer_config: OptimizerConfig = section(lambda: OptimizerConfig(lr=5e-6), "Critic optimizer and LR schedule.")
    fsdp_config: FSDPConfig = section(FSDPConfig, "FSDP2 sharding of the critic (strategy=fsdp2).")
    sequence_parallel_size: int = knob(1, "Ulysses sequence-parallel group size.")
    model_config_kwargs: dict[str, Any] = knob({}, "Extra kwargs set on the HF model config before loading.")


@dataclass
class KLCtrlConfig:
    type: str = knob("fixed", "KL coefficient controller for use_kl_in_reward: 'fixed' or 'adaptive'.")
    kl_target: float = knob(0.1, "Target KL of the adaptive controller.")
    horizon: int = knob(10000, "Horizon (steps) of the adaptive controller.")


@dataclass
class OffPolicyCorrectionConfig:
    tis_ratio_type: str | None = knob(
        None, "Truncated importance sampling of the loss by exp(old - rollout logprobs): null, 'token' or 'sequence'."
    )
    token_tis_ratio_clip_high: float = knob(2.0, "Upper clip of the per-token TIS ratio.")
    sequence_tis_ratio_clip_high: float = knob(5.0, "Upper clip of the per-sequence TIS ratio (product over tokens).")
    sequence_mask_metric: str | None = knob(
        None, "Drop sequences whose ratio is out of bounds: null, 'product' or 'geometric' (mean of log-ratios)."
    )
    geo_mask_high: float = knob(1.01, "Upper bound of the geometric-mean ratio mask.")
    geo_mask_low: float = knob(0.99, "Lower bound of the geometric-mean ratio mask.")
    product_mask_high: float = knob(2.0, "Upper bound of the product ratio mask.")
    product_mask_low: float = knob(0.5, "Lower bound of the product ratio mask.")
    outlier_token_is_threshold_low: float | None = knob(
        None, "Mask sequences with any token ratio below this; null = off."
    )
    outlier_token_is_threshold_high: float | None = knob(
        None, "Mask sequences with any token ratio above this; null = off."
    )

    def enabled(self) -> bool:
        """Whether any rule is on (TIS, the sequence mask or an outlier threshold)."""
        return (
            self.tis_ratio_type is not None
            or self.sequence_mask_metric is not None
            or self.outlier_token_is_threshold_low is not None
            or self.outlier_token_is_threshold_high is not None
        )


@dataclass
class SAPOConfig:
    tau_pos: float = knob(1.0, "SAPO temperature for positive advantages.")
    tau_neg: float = knob(1.05, "SAPO temperature for negative advantages.")


@dataclass
class DynamicSamplingConfig:
    type: str | None = knob(None, "Drop zero-variance groups: null (off), 'filter' or 'replace'.")
    max_sample_batches: int = knob(30, "Max generation batches sampled to fill one training batch.")
    min_replace_ratio: float = knob(0.3, "'replace': min fraction of groups with signal before replacing the rest.")


@dataclass
class ClipCovConfig:
    clip_ratio: float = knob(2e-4, "Fraction of tokens whose gradient is clipped (clip_cov loss).")
    clip_cov_lb: float = knob(1.0, "Lower covariance bound (clip_cov loss).")
    clip_cov_ub: float = knob(5.0, "Upper covariance bound (clip_cov loss).")


@dataclass
class KLCovConfig:
    kl_cov_frac: float = knob(0.2, "Fraction of tokens that get the KL penalty (kl_cov loss).")
    ppo_kl_coef: float = knob(1.0, "KL penalty coefficient (kl_cov loss).")


@dataclass
class CISPOConfig:
    cispo_eps_clip_low: float = knob(0.0, "Lower clip of the IS weight (cispo loss).")
    cispo_eps_clip_high: float = knob(5.0, "Upper clip of the IS weight (cispo loss).")


@dataclass
class AlgorithmConfig(AddedKeys):
    advantage_estimator: str = knob(
        "grpo", "Advantage estimator registry name: grpo, gae, rloo, reinforce++ or custom."
    )
    kl_ctrl: KLCtrlConfig = section(KLCtrlConfig, "KL coefficient control (only with use_kl_in_reward).")
    kl_estimator_type: str = knob("k3", "KL estimator: k1, k2, k3 or abs.")
    use_kl_in_reward: bool = knob(
        False, "Subtract the KL penalty from the reward on the loss-masked tokens (excludes use_kl_loss)."
    )
    use_kl_loss: bool = knob(True, "Add a KL-to-ref term to the policy loss (excludes use_kl_in_reward).")
    kl_loss_coef: float = knob(
        0.001, "Coefficient of the KL loss term; with use_kl_in_reward, the KL controller's initial coefficient."
    )
    use_entropy_loss: bool = knob(False, "Add an entropy bonus to the policy loss.")
    entropy_loss_coef: float = knob(0.01, "Coefficient of the entropy bonus.")
    advantage_batch_normalize: bool = knob(False, "Normalise advantages over the whole batch.")
    value_head_prefix: str = knob("value_head", "Module name of the critic's value head.")
    policy_loss_type: str = knob(
        "regular", "Policy loss registry name: regular, dual_clip, gspo, cross_entropy (supervised), ... or custom."
    )
    loss_reduction: str = knob("token_mean", "Loss reduction: token_mean, sequence_mean or seq_mean_token_sum_norm.")
    grpo_norm_by_std: bool = knob(True, "GRPO: divide group-centred rewards by the group std.")
    zero_variance_filter: bool = knob(
        False,
        "Zero the loss mask of groups whose rewards are all equal. Micro-batches left without a loss token skip the "
        "backward, and (with the KL in the loss only) rows without one skip the reference forward.",
    )
    zero_variance_kl_rows: int = knob(
        0,
        "With zero_variance_filter and use_kl_loss: the first N trajectories of every group the filter leaves out "
        "keep their loss mask with advantage 0, so the KL term still anchors those prompts to the reference (the "
        "filter otherwise leaves them free to drift with the other groups' updates; a critic also fits their values). "
        "0: the filter drops whole groups.",
    )
    zero_variance_kl_coef: float | None = knob(
        None,
        "KL coefficient of the rows zero_variance_kl_rows keeps (null: kl_loss_coef), so that prompts without a "
        "learning signal can be anchored harder than the groups that learn.",
    )
    ptx_coef: float = knob(
        0.0,
        "Weight of a supervised term in every RL optimizer step: the cross-entropy of a batch of the warm start's "
        "conversations (sft.train_data), as InstructGPT's and OpenRLHF's ptx loss, so that RL keeps what the warm start "
        "taught. 0: none. Needs trainer.warm_start=true.",
    )
    ptx_batch_size: int = knob(
        4,
        "Conversations in the ptx term of each RL optimizer step: the next batch of sft.train_data, reshuffled every "
        "pass with trainer.seed.",
    )
    hinted_rows_positive_only: bool = knob(
        False,
        "With generator.train_without_hints: a row trained without its hint keeps only a positive advantage (a negative "
        "one becomes 0), as STaR's rationalization keeps only the hinted solutions that worked: what a hinted rollout "
        "got wrong says little about what to do without the hint.",
    )
    lambd: float = knob(1.0, "GAE lambda.")
    gamma: float = knob(1.0, "Discount factor.")
    eps_clip_low: float = knob(0.2, "PPO ratio clip below 1.")
    eps_clip_high: float = knob(0.2, "PPO ratio clip above 1.")
    clip_ratio_c: float = knob(3.0, "Dual-clip constant c (dual_clip loss).")
    value_clip: float = knob(0.2, "Critic value clip.")
    use_tis: bool = knob(False, "Deprecated (warns): off_policy_correction.tis_ratio_type=token.")
    tis_imp_ratio_cap: float = knob(-1.0, "Deprecated: with use_tis, the token TIS clip (token_tis_ratio_clip_high).")
    off_policy_correction: OffPolicyCorrectionConfig = section(
        OffPolicyCorrectionConfig,
        "Corrections of the policy loss for the rollout/trainer logprob mismatch (needs sampling_params.logprobs=0).",
    )
    sapo: SAPOConfig = section(SAPOConfig, "SAPO loss settings.")
    dynamic_sampling: DynamicSamplingConfig = section(DynamicSamplingConfig, "DAPO-style dynamic sampling.")
    clip_cov: ClipCovConfig = section(ClipCovConfig, "clip_cov loss settings.")
    kl_cov: KLCovConfig = section(KLCovConfig, "kl_cov loss settings.")
    cispo: CISPOConfig = section(CISPOConfig, "cispo loss settings.")
    max_seq_len: int | None = knob(
        None, "Length normaliser of seq_mean_token_sum_norm; null = max_input_length + max_generate_length."
    )
    extra: dict[str, Any] = knob({}, ADDED_KEYS_HELP)


@dataclass
class S3Config:
    bucket: str | None = knob(None, "S3 bucket for checkpoints; null = env S3_CHECKPOINT_BUCKET, else S3 is off.")
    prefix: str | None = knob(
        None, "Key prefix: checkpoints go to {prefix}/{run_name}/global_step_N/; null = trainer.project_name."
    )
    endpoint_url: str | None = knob(
        None, "S3-compatible endpoint (R2, MinIO, ...); null = env AWS_ENDPOINT_URL, else AWS."
    )
    region: str | None = knob(None, "Bucket region; null = AWS_REGION or the boto3 default.")
    keep_local: int = knob(1, "Newest local checkpoints kept once uploaded (-1 = all; 0 = none).")
    keep_remote: int = knob(3, "Newest checkpoints kept under the S3 prefix (-1 = all).")
    eval_bucket: str | None = knob(
        None, "Bucket for eval dumps (evals/{run_name}/global_step_N/); null = env S3_TRAJECTORY_BUCKET, else bucket."
    )
    upload_attempts: int = knob(5, "Tries per S3 transfer before an upload is reported failed (backoff 1 s to 60 s).")
    flush_timeout_seconds: float = knob(
        600.0, "At exit (normal, error, SIGTERM, SIGINT) wait this long for pending uploads, then name what is left."
    )


@dataclass
class FullyAsyncConfig:
    max_staleness_steps: int = knob(
        0,
        "Asynchronous training: generation runs ahead of the trained policy by at most this many weight versions "
        "and groups are trained in the order they finish; rows older than this are dropped and their prompts "
        "generated again. 0 = the synchronous loop (upstream's default is 4).",
    )
    num_parallel_generation_workers: int = knob(
        768, "Prompt groups (n_samples_per_prompt trajectories each) generated at the same time when asynchronous."
    )
    default_correction: bool = knob(
        True,
        "When asynchronous with no off_policy_correction rule set: token TIS (tis_ratio_type=token) against the "
        "rollout logprobs, the behaviour policy's; false trains rows up to max_staleness_steps old uncorrected.",
    )


STRATEGIES = ("single", "fsdp2")
"""The `trainer.strategy` values: ``single`` trains in this process, ``fsdp2`` on Ray actors, one per rank.
`skyrl_train.strategies` implements each (a test checks that its registry names exactly these)."""

DISTRIBUTED_STRATEGIES = frozenset({"fsdp2"})
"""The strategies whose workers are Ray actors, one process per rank, data parallel over `trainer.placement`."""


@dataclass
class TrainerConfig:
    placement: PlacementConfig = section(PlacementConfig, "How many nodes and devices each model gets.")
    sequence_parallel_backend: str = knob("ulysses", "Sequence-parallel implementation; only 'ulysses'.")
    strategy: str = knob("single", "Training strategy: 'single' (one process) or 'fsdp2' (processes and nodes).")
    device: str = knob(
        "auto",
        "Device of the single-process workers and the local hf engine: auto (CUDA when visible, else CPU), cpu, cuda "
        "or cuda:N. fsdp2 ranks take theirs from Ray.",
    )
    policy: PolicyConfig = section(PolicyConfig, "The trained policy.")
    ref: RefConfig = section(RefConfig, "The frozen reference model (built only if a KL term is on).")
    critic: CriticConfig = section(CriticConfig, "The critic (built only if critic.model.path is set).")
    algorithm: AlgorithmConfig = section(AlgorithmConfig, "Advantages, losses and KL.")
    train_batch_size: int = knob(1024, "Prompts per training step.")
    policy_mini_batch_size: int = knob(256, "Prompts per policy optimizer step.")
    critic_mini_batch_size: int = knob(256, "Prompts per critic optimizer step.")
    micro_train_batch_size_per_gpu: int = knob(1, "Sequences per forward/backward pass on one worker.")
    micro_forward_batch_size_per_gpu: int = knob(1, "Sequences per logprob forward pass on one worker.")
    update_epochs_per_batch: int = knob(1, "Passes over each training batch.")
    epochs: int = knob(1, "Passes over the training dataset.")
    use_sample_packing: bool = knob(
        False,
        "Pack each micro-batch's sequences into one row without padding in the policy and ref forward passes (same "
        "results, less compute and memory); the critic's value forward stays padded.",
    )
    eval_batch_size: int = knob(1024, "Prompts per evaluation batch.")
    eval_before_train: bool = knob(True, "Evaluate once before the first step.")
    eval_interval: int = knob(5, "Evaluate every N steps; -1 = never.")
    ckpt_interval: int = knob(10, "Save a checkpoint every N steps; -1 = never.")
    hf_save_interval: int = knob(-1, "Export HF weights every N steps; -1 = only at the end.")
    ckpt_path: str = knob("~/ckpts/", "Folder for checkpoints (global_step_N/ and latest_ckpt_global_step.txt).")
    export_path: str = knob("~/exports/", "Folder for HF exports, eval dumps and data dumps.")
    push_to_hub: bool = knob(
        False,
        "Push every HF export to the Hugging Face Hub repo hub_model_id: the PEFT adapter with LoRA, else the merged "
        "model. Offline mode (HF_HUB_OFFLINE), a missing token or an unreachable Hub stop the run before the model "
        "loads.",
    )
    hub_model_id: str | None = knob(None, "Hub repo (`user/name` or `org/name`) that push_to_hub pushes to.")
    max_ckpts_to_keep: int = knob(-1, "Newest checkpoints kept in ckpt_path; -1 = all.")
    resume_mode: str | None = knob("latest", "Resume: 'none' (or null), 'latest' or 'from_path'.")
    resume_path: str | None = knob(None, "Checkpoint folder (global_step_N) for resume_mode=from_path.")
    resume_run_name: str | None = knob(
        None, "Run whose newest S3 checkpoint starts this run when it has none of its own; null = env RESUME_RUN_NAME."
    )
    s3: S3Config = section(S3Config, "S3 checkpoint and eval-dump sink.")
    fully_async: FullyAsyncConfig = section(
        FullyAsyncConfig, "Asynchronous training: generation overlaps the policy update, with bounded staleness."
    )
    gradient_checkpointing: bool = knob(True, "Recompute activations in backward to save memory.")
    gradient_checkpointing_use_reentrant: bool = knob(False, "Use torch's reentrant checkpointing.")
    max_infra_failure_ratio: float = knob(
        0.5,
        "A step in which more than this fraction of trajectories are infrastructure failures stops the run, naming "
        "the count per stop reason and a sample error; exactly this fraction goes on. 0 = stop on any, 1.0 = never.",
    )
    seed: int = knob(
        42,
        "Seed of the run: data order, model init (LoRA), dropout and, where generator.sampling_params.seed or "
        "eval_sampling_params.seed is null, each rollout request's sampling seed (derived from this and the request's "
        "phase, step, prompt uid, sample and turn). Same seed on the same machine (same torch threads): the same "
        "rollouts and updates, except that batched forwards of different batch compositions, which thread timing "
        "sets, can differ in the last bits of the logits and so, rarely, flip a sampled token "
        "(learnings/reproducibility.md).",
    )
    bf16: bool | None = knob(
        None,
        "Train and generate in bfloat16 (true) or float32 (false); null = bfloat16 on a GPU and on a CPU with AMX bf16 "
        "(amx_bf16 and avx512_bf16 in /proc/cpuinfo), float32 on other CPUs. On the CPU bf16 is autocast over fp32 "
        "weights and optimizer state (LM-head logits and logprobs in fp32), the hf engine decoding with bf16 copies "
        "of the weights; fsdp2 keeps fp32 masters on GPUs and CPUs alike.",
    )
    cpu_threads: int | None = knob(
        None,
        "Torch intra-op threads of the training process and of its hf engine; null = torch's default (one per core). "
        "1 avoids OpenMP threads waiting on each other when other busy processes share the cores.",
    )
    max_prompt_length: int = knob(512, "Max prompt tokens; longer dataset prompts are dropped.")
    flash_attn: bool = knob(False, "Use flash attention (flash-attn) in the models.")
    disable_fast_tokenizer: bool = knob(False, "Load the slow (Python) tokenizer.")
    update_ref_every_epoch: bool = knob(False, "Copy the policy weights into the ref model after each epoch.")
    warm_start: bool = knob(
        False,
        "main_base: before the first RL step, fine-tune the policy on sft.train_data (the sft block) in the same job; "
        "RL then starts from the warm-started policy, with a new optimizer (docs/sft.md).",
    )
    warm_start_reference: str = knob(
        "warm_start",
        "The KL reference after a warm start: 'warm_start' (the warm-started policy; with LoRA the warm-start adapter "
        "is folded into the base weights and RL trains a fresh one) or 'base' (the model before it; with LoRA RL "
        "trains on the warm-start adapter).",
    )
    project_name: str = knob("skyrl", "Project name for trackers and the default S3 prefix.")
    run_name: str = knob("test_run", "Run name for trackers, S3 prefixes and dumps.")
    logger: str | list[str] = knob(
        "console",
        "Tracking backends: one or a list of console, jsonl, tensorboard, wandb, mlflow (MLFLOW_TRACKING_URI, else a "
        "file store in export_path/mlruns). export_path/metrics.jsonl, which the run report reads, is written whatever "
        "this lists; W&B and MLflow runs resume with the checkpoint.",
    )
    dump_data_batch: bool = knob(False, "Dump each training batch to export_path for debugging.")
    dump_eval_results: bool = knob(True, "Dump eval trajectories as JSONL per data source.")
    rope_scaling: dict[str, Any] | None = knob(None, "RoPE scaling dict set on the model config; null = model's own.")
    rope_theta: float | None = knob(None, "RoPE theta set on the model config; null = model's own.")

    @property
    def distributed(self) -> bool:
        """`strategy` runs the workers as Ray actors, one process per rank, data parallel over `placement` (fsdp2);
        False: the workers run in this process (single)."""
        return self.strategy in DISTRIBUTED_STRATEGIES

    @property
    def needs_ref(self) -> bool:
        """A KL term is on (`algorithm.use_kl_loss` or `use_kl_in_reward`): the run computes reference logprobs."""
        return self.algorithm.use_kl_loss or self.algorithm.use_kl_in_reward

    @property
    def separate_ref_model(self) -> bool:
        """`needs_ref` and a policy without LoRA: the reference is a model of its own (on workers of its own with
        fsdp2). With LoRA it is the policy's module with the adapter switched off."""
        return self.needs_ref and self.policy.model.lora.rank == 0

    def training_dtype(self, device: "torch.device | str") -> "torch.dtype":
        """The dtype a single-process model loads and trains its weights in on `device`: bf16 on CUDA when `bf16` is
        true or unset, else fp32 (bf16 on the CPU is autocast over fp32 weights; `utils.device.precision`)."""
        return training_dtype(self.bf16, device)


# ------------------------------------------------------------------------------------------ generator


@dataclass
class ChatTemplateConfig:
    source: str = knob("name", "Where name_or_path points: 'name' (built-in template) or 'file'.")
    name_or_path: str | None = knob(None, "Chat template name or file; null = the tokenizer's own.")


@dataclass
class GeneratorConfig(AddedKeys):
    model_name: str = knob(
        "${trainer.policy.model.path}",
        "The `model` name requests to remote engines carry (their served model name); defaults to the policy path.",
    )
    model_dtype: str = knob(
        "bfloat16",
        "vLLM engine weight dtype; full-weight syncs are cast to it (the hf engine uses the policy's own weights).",
    )
    run_engines_locally: bool = knob(True, "Start engines in this job; false = use remote_inference_engine_urls.")
    num_inference_engines: int = knob(1, "Number of inference engines (local, or one per remote URL).")
    backend: str = knob(
        "hf", "Local engine: 'hf' (transformers, in this process, on the policy's weights) or 'vllm' (Ray actors)."
    )
    weight_sync_backend: str = knob(
        "nccl",
        "Backend of the trainer-to-engine weight broadcast: nccl (GPU) or gloo (CPU); the local hf engine shares "
        "the policy's weights.",
    )
    weight_transfer_threshold_cuda_ipc_GB: float = knob(
        1.0, "Most GiB packed into one CUDA IPC buffer per GPU (one chunk of a weight sync)."
    )
    inference_engine_tensor_parallel_size: int = knob(1, "Tensor parallelism inside each engine.")
    inference_engine_pipeline_parallel_size: int = knob(1, "Pipeline parallelism inside each engine.")
    inference_engine_expert_parallel_size: int = knob(1, "Expert parallelism inside each engine.")
    inference_engine_data_parallel_size: int = knob(1, "Data parallelism inside each engine.")
    async_engine: bool = knob(True, "Use the async engine API (needed by multi-turn agent loops).")
    batched: bool = knob(
        False,
        "Upstream's batched mode: single-turn trajectories (generator.max_turns=1) whose reward is one float per "
        "response (on its last token in training) instead of a list per token; the engine batches the requests either "
        "way.",
    )
    vllm_v1_disable_multiproc: bool = knob(
        True, "Upstream sets VLLM_ENABLE_V1_MULTIPROCESSING=0 with it; vLLM's async engine ignores that variable."
    )
    enable_prefix_caching: bool = knob(
        True, "Reuse the KV of shared prompt prefixes (vLLM prefix caching; the hf engine's prefix cache)."
    )
    prefix_cache_bytes: int = knob(
        2 * 2**30,
        "hf engine: memory for cached prefix KV; least recently used entries go first beyond it. Finished "
        "conversations stay cached until evicted, so this bounds the engine's memory more than its reuse.",
    )
    enable_chunked_prefill: bool = knob(True, "vLLM chunked prefill.")
    max_num_batched_tokens: int = knob(8192, "vLLM max tokens per scheduler step.")
    enforce_eager: bool = knob(True, "vLLM: disable CUDA graphs.")
    fully_sharded_loras: bool = knob(False, "vLLM fully_sharded_loras.")
    enable_ray_prometheus_stats: bool = knob(False, "Export vLLM stats through Ray's Prometheus metrics.")
    gpu_memory_utilization: float = knob(
        0.8, "vLLM fraction of GPU memory for weights and KV cache (vLLM's CPU build: of RAM; see docs/vllm.md)."
    )
    max_num_seqs: int = knob(1024, "Max concurrent sequences per engine.")
    remote_inference_engine_urls: list[str] = knob(["127.0.0.1:8001"], "host:port of remote engines.")
    remote_inference_engine_api_key: str | None = knob(
        None,
        "Secret sent as `Authorization: Bearer` with generation requests to remote engines (their --api-key); "
        "e.g. '${oc.env:SKYRL_API_KEY}'. Redacted in logs.",
    )
    remote_inference_engine_control_token: str | None = knob(
        None,
        "Secret sent with control calls (sleep, weight sync) to remote engines: their --control-token "
        "(python -m skyrl_train.serve --enable-control); e.g. '${oc.env:SKYRL_CONTROL_TOKEN}'. Redacted in logs.",
    )
    engine_init_kwargs: dict[str, Any] = knob(
        {}, "Extra vLLM AsyncEngineArgs, applied last (e.g. max_model_len, kv_cache_memory_bytes)."
    )
    override_existing_update_group: str = knob(
        "auto", "Re-create a remote engine's weight-update group: auto, enable or disable."
    )
    enable_http_endpoint: bool = knob(False, "Serve an OpenAI-compatible HTTP endpoint over the engines.")
    http_endpoint_host: str = knob("127.0.0.1", "Host of the HTTP endpoint.")
    http_endpoint_port: int = knob(8000, "Port of the HTTP endpoint.")
    http_endpoint_api_key: str | None = knob(
        None,
        "Secret the HTTP endpoint's OpenAI routes need as `Authorization: Bearer` (401 without); null = open. "
        "Redacted in logs.",
    )
    served_model_name: str | None = knob(None, "Model name the HTTP endpoint answers to; null = model_name.")
    n_samples_per_prompt: int = knob(5, "Trajectories per prompt in training (the GRPO group size).")
    max_input_length: int = knob("${trainer.max_prompt_length}", "Max tokens of the whole running context per turn.")
    max_turns: int = knob(1, "Max assistant turns per trajectory.")
    chat_template: ChatTemplateConfig = section(ChatTemplateConfig, "Chat template override.")
    chat_template_kwargs: dict[str, Any] = knob({}, "Extra kwargs for apply_chat_template.")
    use_conversation_multi_turn: bool = knob(True, "Multi-turn as chat messages (false = one growing assistant turn).")
    append_eos_token_after_stop_str_in_multi_turn: bool = knob(True, "Append EOS when a turn ends on a stop string.")
    zero_reward_on_non_stop: bool = knob(False, "Reward 0 for trajectories that did not end with stop_reason=stop.")
    apply_overlong_filtering: bool = knob(False, "Mask out trajectories truncated by length (DAPO).")
    truncated_turn_ends_trajectory: bool = knob(
        False,
        "A turn cut by max_generate_length ends the trajectory (stop reason length, reward 0) instead of reaching "
        "the env, whose tool-call parser might run a call whose JSON was cut.",
    )
    train_without_hints: bool = knob(
        False,
        "A row whose extra_info.hint is set (the text its last user message ends with) is generated with the hint and "
        "trained without it: the training rows carry the prompt without the hint, so the hinted replies are trained "
        "as replies to the question alone. Its rollout logprobs stay those of the hinted prompt, so an "
        "off_policy_correction weighs what the hint changed down.",
    )
    step_wise_trajectories: bool = knob(False, "Train on each turn as its own sample.")
    rope_scaling: dict[str, Any] | None = knob("${trainer.rope_scaling}", "RoPE scaling for the engines.")
    rope_theta: float | None = knob("${trainer.rope_theta}", "RoPE theta for the engines.")
    sampling_params: SamplingParams = section(SamplingParams, "Sampling for training rollouts.")
    eval_sampling_params: SamplingParams = section(lambda: SamplingParams(temperature=0.0), "Sampling for eval.")
    eval_n_samples_per_prompt: int = knob(1, "Trajectories per prompt in eval (the n of pass@n).")
    trajectory_timeout_seconds: float = knob(900, "Wall-clock limit per trajectory; 0 = no limit.")
    inject_context_status: bool = knob(False, "Append '[Context: N/M tokens (P%), Turn t/T]' to observations.")
    extra: dict[str, Any] = knob({}, ADDED_KEYS_HELP)


# ---------------------------------------------------------------------------------------- environment


@dataclass
class SkyRLGymConfig:
    """skyrl-gym settings; every key besides max_env_workers is one env's config block, keyed by env id."""

    _extra_keys_field: ClassVar[str] = "env_configs"

    max_env_workers: int = knob(32, "Threads for sync env init/step/close; 0 = run inline.")
    env_configs: dict[str, dict[str, Any]] = knob(
        {
            "text2sql": {"db_path": "/home/ray/default/sql_data"},
            "llm_as_a_judge": {"model": "gpt-4o-mini", "base_url": None},
            "search": {"log_requests": False, "search_url": "http://127.0.0.1:8000/retrieve", "topk": 3, "timeout": 30},
        },
        "Any other key here is an env id; its block is passed to that env as env_config. The id must be a "
        "registered env's and the keys ones it declares (Env.env_config_keys), else the config is refused.",
    )

    def get_env_config(self, env_id: str) -> DictConfig:
        """The config block of `env_id` as a DictConfig (empty if there is none)."""
        return OmegaConf.create(copy.deepcopy(self.env_configs.get(env_id, {})))

    def __getattr__(self, name: str) -> DictConfig:
        # Upstream code reads `getattr(cfg.environment.skyrl_gym, env_id, {})`; keep that working.
        envs = self.__dict__.get("env_configs")
        if name.startswith("_") or envs is None or name not in envs:
            raise AttributeError(name)
        return self.get_env_config(name)


@dataclass
class EnvironmentConfig:
    env_class: str = knob("gsm8k", "Env id for dataset rows whose env_class is null.")
    skyrl_gym: SkyRLGymConfig = section(SkyRLGymConfig, "skyrl-gym settings and per-env config blocks.")


# ------------------------------------------------------------------------------------------------ sft


@dataclass
class SFTConfig:
    """Supervised fine-tuning on conversations (main_sft, and trainer.warm_start); the model, optimizer, strategy,
    checkpoints, logging and intervals are the trainer section's keys."""

    train_data: list[str] = knob(
        [],
        "Conversations to fine-tune on: .jsonl/.json/.parquet paths or HF ids, rows with a chat `messages` list or "
        "TRL's `prompt` and `completion` lists (assistant tool_calls and OpenAI's `weight`, tool messages, optional "
        "per-row tools; docs/sft.md); empty = no SFT.",
    )
    eval_data: list[str] = knob(
        [],
        "Conversations whose loss and top-1 token accuracy are measured: main_sft every trainer.eval_interval steps "
        "and after the last; a warm start after its last step. Empty = none.",
    )
    messages_key: str = knob("messages", "Row field holding the conversation.")
    tools_key: str = knob(
        "tools", "Row field holding the row's tool schemas, rendered by a chat template that takes tools."
    )
    max_length: int = knob(2048, "Most tokens of one conversation, prompt included.")
    truncation: str = knob(
        "error",
        "A conversation longer than max_length: 'error' (refused before training, naming the file and row) or "
        "'truncate' (its first max_length tokens are trained on, counted in sft/truncated_rows).",
    )
    train_on_what: str = knob(
        "all_assistant_messages",
        "Assistant turns in the loss: 'all_assistant_messages' or 'last_assistant_message' (upstream's default); "
        "every other token is context only.",
    )
    num_steps: int | None = knob(None, "Optimizer steps; null = num_epochs passes over train_data.")
    num_epochs: int = knob(
        1, "Passes over train_data (the last partial batch of each is dropped) when num_steps is null."
    )
    batch_size: int = knob(
        8, "Conversations per optimizer step, in micro-batches of trainer.micro_train_batch_size_per_gpu."
    )
    lr: float | None = knob(
        None, "Peak learning rate of the SFT steps; null = trainer.policy.optimizer_config.lr (its other keys apply)."
    )


# --------------------------------------------------------------------------------------------- root


@dataclass
class SkyRLConfig:
    data: DataConfig = section(DataConfig, "Datasets.")
    trainer: TrainerConfig = section(TrainerConfig, "Training loop, models, algorithm, checkpoints and logging.")
    generator: GeneratorConfig = section(GeneratorConfig, "Inference engines and the agent loop.")
    environment: EnvironmentConfig = section(EnvironmentConfig, "Environments.")
    sft: SFTConfig = section(SFTConfig, "Supervised fine-tuning on conversations (main_sft, trainer.warm_start).")

    def __post_init__(self) -> None:
        # Defaults such as generator.model_name are interpolations (`${trainer.policy.model.path}`);
        # resolve them so a config built in Python reads like one loaded from YAML.
        tree = to_dict(self)
        if _has_interpolation(tree):
            _assign_resolved(self, OmegaConf.to_container(OmegaConf.create(tree), resolve=True))


def _assign_resolved(block: Any, resolved: dict[str, Any]) -> None:
    """Set each interpolated value below the dataclass `block` to its value in `resolved` (the `to_dict` layout)."""
    extra = extra_keys_field(type(block))
    for f in dataclasses.fields(block):
        value = getattr(block, f.name)
        if f.name == extra:
            value.update({k: resolved[k] for k, v in value.items() if _has_interpolation(v)})
        elif dataclasses.is_dataclass(value):
            _assign_resolved(value, resolved[f.name])
        elif _has_interpolation(value):
            setattr(block, f.name, resolved[f.name])


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(_has_interpolation(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_interpolation(v) for v in value)
    return False


def to_dict(cfg: Any) -> Any:
    """Plain nested dicts/lists of a config (or any block of it), in the YAML layout.

    Undeclared keys (per-env blocks, extra sampling params) go back to their block's top level, so
    `build_config(to_dict(cfg))` round-trips.
    """
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        extra = extra_keys_field(type(cfg))
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cfg):
            if f.name == extra:
                continue
            out[f.name] = to_dict(getattr(cfg, f.name))
        if extra:
            out.update(to_dict(getattr(cfg, extra)))
        return out
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    if isinstance(cfg, list | tuple):
        return [to_dict(v) for v in cfg]
    return copy.deepcopy(cfg)
