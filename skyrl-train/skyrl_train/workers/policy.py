"""``PolicyWorker``: the trained policy (LoRA or full fine-tuning), its PPO loss and health metrics, and the supervised
fine-tuning step (``sft_train``: the ``cross_entropy`` loss through the same forward/backward; see there).

Loss of one mini-batch, every term reduced with the mini-batch's normaliser ``Z`` (``loss_reduction``)::

    final_loss = policy_loss + kl_loss_coef · policy_kl − entropy_loss_coef · policy_entropy

``policy_kl`` is ``compute_approx_kl(logp, base_action_log_probs, kl_estimator_type)`` and enters the loss only
with ``use_kl_loss``; rows the batch marks ``kl_only`` (kept by ``zero_variance_kl_rows``, advantage 0) weigh theirs
with ``zero_variance_kl_coef`` when that is set, and count in the reported ``policy_kl`` like any other row.
``policy_entropy`` enters the loss only with ``use_entropy_loss``. Both are reported whenever they can be computed.
With ``ppo_train``'s ``sft_batch`` each optimizer step also backpropagates ``ptx_coef · ptx_loss``, the SFT loss of
those conversations (the ptx term; ``final_loss`` does not include it).

Metrics of ``ppo_train`` (prefix ``policy/``), averaged over the update's optimizer steps unless noted:

- upstream status keys: ``final_loss``, ``policy_loss``, ``policy_entropy``, ``policy_kl`` (KL to the reference,
  when ``base_action_log_probs`` is in the batch), ``response_length`` (mean response tokens per row),
  ``policy_lr``, ``grad_norm`` (before clipping), ``loss_metrics/<k>`` (the policy loss's own metrics, e.g.
  ``clip_ratio``, ``clip_frac_low``, ``clip_frac_high``, ``ppo_kl``, as masked-token means);
- importance ratio ``exp(logp − logp_old)`` per loss-masked token, whatever the loss type: ``ratio_mean``,
  ``ratio_std`` (per step, population std), ``ratio_min``, ``ratio_max`` (over the whole update);
- ``approx_kl_old``: masked-token mean of the ``k3`` estimate of the KL between the current and the old policy;
- counts over the update: ``skipped_steps`` (non-finite gradient norm), ``empty_loss_mask_skips``;
- ``degenerate_update``: 1.0 if the policy never moved (below), else 0.0;
- with an ``sft_batch``: ``ptx_loss`` and ``ptx_token_accuracy`` (``sft_train``'s ``loss`` and ``token_accuracy`` of
  those conversations, before each step's update);
- ``rollout_train_logprobs_abs_diff_mean`` / ``_std``: ``|rollout_logprobs − action_log_probs|`` on loss-masked
  tokens, when the batch carries rollout logprobs (engine vs trainer mismatch; should be ~0);
- with ``trainer.algorithm.off_policy_correction`` on: ``loss_metrics/is_ratio_mean`` / ``_std`` / ``_min`` /
  ``_max`` (``exp(old − rollout)`` over loss tokens) and the fractions of tokens capped and rows masked by each rule
  (``tis_token_clip_high_ratio``, ``tis_seq_clip_high_ratio``, ``outlier_seq_*``, ``geo_sequence_mask_*``,
  ``product_sequence_mask_*``), exact per mini-batch (their own token or row denominators); definitions in
  ``skyrl_train.algorithms.off_policy``.

Off-policy correction. The correction factor (TIS weight times kept-row mask) multiplies the per-token loss of the
configured policy loss, built-in or custom, before the reduction; a batch without ``rollout_logprobs`` is refused
when a correction is on, and so is a custom loss that returns a loss it reduced itself (``algorithms.loss_calls``).

Degenerate update. On the first mini-batch of the first epoch of on-policy PPO the old logprobs come from the
very same weights, so every ratio is exactly 1: that is expected. After an optimizer step that really changed the
weights (finite gradient, learning rate > 0), later mini-batches must see ratios ≠ 1. So an update is degenerate
when at least one forward pass ran after such a step and yet every importance ratio of the whole update (all
epochs and mini-batches) was identical (ratio std exactly 0, i.e. ``ratio_min == ratio_max``). Typical causes: the
old logprobs are recomputed inside the update, the optimizer holds other parameters than the forward uses, or the
learning rate is too small to change a float32 logit. It is logged as a warning.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from skyrl_train.algorithms import (
    LossReduction,
    PolicyLossRegistry,
    compute_approx_kl,
    compute_loss_normalizer,
    reduce_loss,
)
from skyrl_train.algorithms.loss_calls import call_policy_loss
from skyrl_train.algorithms.off_policy import OffPolicyStats, correction_factor, finalize_is_ratio_std
from skyrl_train.algorithms.policy_losses import LOG_RATIO_CLAMP, PolicyLossType
from skyrl_train.models import load_causal_lm
from skyrl_train.models.lora import ADAPTER_DIR, apply_lora, write_peft_adapter
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.workers.forward import (
    batch_prefix,
    batched_response_logprobs,
    eval_mode,
    has_active_dropout,
    response_logprobs,
)
from skyrl_train.workers.lm_head import head_outside_autocast
from skyrl_train.workers.metrics import combine_micro_metrics, rollout_train_logprob_diff
from skyrl_train.workers.shared_prefix import SharedPrefix
from skyrl_train.workers.trainable import MiniBatchInfo, TrainableWorker, enable_gradient_checkpointing

if TYPE_CHECKING:
    from skyrl_train.config.schema import AlgorithmConfig, PolicyConfig

__all__ = ["PolicyWorker"]

logger = logging.getLogger(__name__)

LOSS_METRICS_PREFIX = "loss_metrics/"
ZERO_AT_ZERO_ADVANTAGE = frozenset(PolicyLossType) - {PolicyLossType.CROSS_ENTROPY}
"""Policy losses whose per-token loss is ``A`` times a finite factor, hence zero with a zero gradient where the
advantage ``A`` is zero (a registered custom loss is not assumed to be; ``cross_entropy`` reads no advantage)."""


class PolicyWorker(TrainableWorker):
    """The policy on one process: old-logprob forward passes, PPO updates, checkpoints and HF export.

    Args:
        policy_config: ``trainer.policy`` (reads ``model.path``, ``model.lora``, ``optimizer_config``,
            ``model_config_kwargs``). LoRA when ``model.lora.rank > 0`` (only adapter weights train), else full
            fine-tuning.
        algorithm_config: ``trainer.algorithm`` (reads ``policy_loss_type``, ``loss_reduction``, ``max_seq_len``,
            ``use_kl_loss``, ``kl_loss_coef``, ``kl_estimator_type``, ``use_entropy_loss``,
            ``entropy_loss_coef``); passed whole to the policy loss, which reads its own keys.
        temperature: ``generator.sampling_params.temperature``; logits are divided by it (0 counts as 1).
        num_training_steps: optimizer steps of the whole run, for schedulers that decay (upstream: total steps ×
            mini-batches per batch × update epochs).
        gradient_checkpointing, gradient_checkpointing_use_reentrant: ``trainer.gradient_checkpointing*``.
        sample_packing: ``trainer.use_sample_packing``: each micro-batch's rows go through the model packed into one
            row without padding (`skyrl_train.workers.packing`), in the update and the old-logprob passes; a prefix
            all rows of a mini-batch share is then computed once for all its micro-batches (`SharedPrefix`).
        dtype, device: the weights' dtype and device.
        autocast_dtype: the forwards run under autocast to it over the ``dtype`` weights (``TrainableWorker``).
    """

    metric_prefix = "policy/"
    lr_metric = "policy_lr"

    def __init__(
        self,
        policy_config: PolicyConfig,
        algorithm_config: AlgorithmConfig,
        *,
        temperature: float = 1.0,
        num_training_steps: int | None = None,
        gradient_checkpointing: bool = False,
        gradient_checkpointing_use_reentrant: bool = False,
        dtype: str | torch.dtype = "float32",
        device: str | torch.device = "cpu",
        sample_packing: bool = False,
        autocast_dtype: torch.dtype | None = None,
    ):
        model_path = policy_config.model.path
        if not model_path:
            raise ValueError("trainer.policy.model.path is not set")
        model = load_causal_lm(model_path, dtype, device, **policy_config.model_config_kwargs)
        if gradient_checkpointing:
            enable_gradient_checkpointing(model, gradient_checkpointing_use_reentrant)
        self.lora_config = policy_config.model.lora
        self.uses_lora = self.lora_config.rank > 0
        if self.uses_lora:
            model = apply_lora(model, self.lora_config, task_type="CAUSAL_LM")
        super().__init__(model, model_path, policy_config.optimizer_config, num_training_steps)
        self.algorithm_config = algorithm_config
        self.temperature = temperature
        self.sample_packing = sample_packing
        self.autocast_dtype = autocast_dtype
        if autocast_dtype is not None:
            head_outside_autocast(self.model)
        self._mini_batch_prefix: SharedPrefix | None = None
        """While `forward_backward` runs with sample packing: the mini-batch's shared prefix, or None."""
        self.policy_loss_fn = PolicyLossRegistry.get(algorithm_config.policy_loss_type)
        self.sft_loss_fn = PolicyLossRegistry.get(PolicyLossType.CROSS_ENTROPY.value)
        self.corrects_off_policy = algorithm_config.off_policy_correction.enabled()
        """Whether the per-token policy loss is corrected with the rollout logprobs (``algorithms.off_policy``)."""
        self.stochastic_forward = has_active_dropout(self.model)
        """Whether the training-mode forward is random (dropout): its logprobs are then not the old policy's."""
        self._old_logprobs_from_forward = False
        """Set by `ppo_train` for a batch without old logprobs (see there)."""
        self._supervised = False
        """Set while `sft_train` / `sft_eval` (and a ptx term) run: the micro-batch loss is the SFT one (see there)."""
        self._supervised_weight = 1.0
        """The factor on the SFT loss that is backpropagated: ``ptx_coef`` for the ptx term, else 1."""
        self._ptx_batch: TrainingInputBatch | None = None
        """Set by `ppo_train` for its ``sft_batch``: the conversations of the ptx term of each optimizer step."""
        self.base_weights_folded = False
        """The LoRA base weights are not the model path's: a warm start folded its adapter into them (`fold_adapter`,
        or its saved result loaded). The adapter alone then describes no model anyone can load, so no PEFT adapter
        folder is written (`write_adapter`); the merged HF export is the whole policy."""

    def compute_logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        """Logprobs ``[B, R]`` of the response tokens under the current weights (no grad, eval mode): the "old"
        logprobs (``action_log_probs``) of a PPO update; 0 where the batch's ``loss_mask`` is 0. Returned on the CPU,
        whatever the model's device."""
        return self._logprobs(batch.to(self.device), micro_batch_size).cpu()

    def _logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        with self._computing():
            return batched_response_logprobs(
                self.model, batch, micro_batch_size, self.temperature, self.sample_packing, self.uniform_forwards
            )

    def forward_backward(self, mini_batch: TrainingInputBatch, micro_batch_size: int) -> dict[str, float]:
        """See `TrainableWorker.forward_backward`. With sample packing, a prefix all rows of the mini-batch share is
        computed once for all micro-batches; each micro-batch's backward stops at its keys and values, and the summed
        gradient goes through the prefix's layers once at the end (`SharedPrefix`, ``for_micro_batches``): the same
        gradient as computing it per micro-batch."""
        if not self.sample_packing or self.uniform_forwards:
            return super().forward_backward(mini_batch, micro_batch_size)
        self.model.train()
        with self._computing():
            self._mini_batch_prefix = batch_prefix(self.model, mini_batch, for_micro_batches=True)
        try:
            metrics = super().forward_backward(mini_batch, micro_batch_size)
            if self._mini_batch_prefix is not None:
                self._mini_batch_prefix.backward()
            return metrics
        finally:
            self._mini_batch_prefix = None

    # ------------------------------------------------------------------------------ supervised fine-tuning

    def sft_train(self, batch: TrainingInputBatch, micro_batch_size: int) -> dict[str, float]:
        """One supervised fine-tuning step on ``batch``, one optimizer step, through the same forward/backward as a PPO
        update (micro-batches, sample packing, a shared prefix computed once, gradient accumulation).

        The loss is the ``cross_entropy`` policy loss (``−logp`` of every loss-masked token: the assistant tokens of
        the conversations) at temperature 1, whatever the sampling temperature, reduced with ``token_mean`` over the
        whole batch (every data-parallel rank's rows): the mean over its loss tokens, whatever the micro-batch size. No
        KL or entropy term, whatever ``trainer.algorithm`` says. Returns (unprefixed) ``loss``, ``token_accuracy``
        (the fraction of loss tokens that are a most likely token of their distribution), ``num_tokens`` (loss
        tokens), ``grad_norm`` (before clipping), ``lr`` (of this step) and ``skipped_steps`` (1 for a non-finite
        gradient norm)."""
        batch = batch.to(self.device)
        with self._supervised_loss():
            metrics = self.forward_backward(batch, micro_batch_size)
        step = self.optim_step()
        return {
            **metrics,
            "grad_norm": step["grad_norm"],
            "lr": step[self.lr_metric],
            "skipped_steps": step["skipped_steps"],
        }

    @torch.no_grad()
    def sft_eval(self, batch: TrainingInputBatch, micro_batch_size: int) -> dict[str, float]:
        """``loss``, ``token_accuracy`` and ``num_tokens`` of ``sft_train`` on ``batch`` under the current weights, in
        eval mode, without training."""
        batch = batch.to(self.device)
        metrics: dict[str, float] = {}
        with self._supervised_loss(), eval_mode(self.model), self._computing():
            info = self._mini_batch_info(batch)
            for micro_batch in batch.chunk(micro_batch_size):
                combine_micro_metrics(metrics, self._micro_batch_loss(micro_batch, info)[1])
        combined: dict[str, float] = {}
        for rank_metrics in self._gather(metrics):
            combine_micro_metrics(combined, rank_metrics)
        return combined

    @contextmanager
    def _supervised_loss(self, weight: float = 1.0) -> Iterator[None]:
        self._supervised, self._supervised_weight = True, weight
        try:
            yield
        finally:
            self._supervised, self._supervised_weight = False, 1.0

    def _accumulate_other_terms(self, micro_batch_size: int) -> dict[str, float]:
        """The ptx term (``ppo_train``'s ``sft_batch``): ``ptx_coef`` times the SFT loss of the conversations, its
        gradient added to the RL mini-batch's before the optimizer step. Returns ``ptx_loss`` and
        ``ptx_token_accuracy`` (``sft_train``'s ``loss`` and ``token_accuracy``, unweighted)."""
        if self._ptx_batch is None:
            return {}
        with self._supervised_loss(self.algorithm_config.ptx_coef):
            metrics = self.forward_backward(self._ptx_batch, micro_batch_size)
        return {"ptx_loss": metrics["loss"], "ptx_token_accuracy": metrics["token_accuracy"]}

    def _sft_micro_batch_loss(
        self, micro_batch: TrainingInputBatch, info: MiniBatchInfo
    ) -> tuple[torch.Tensor, dict[str, float]]:
        loss_mask = micro_batch["loss_mask"]
        logprobs, _, top1 = response_logprobs(
            self.model,
            micro_batch["sequences"],
            micro_batch["attention_mask"],
            loss_mask.shape[1],
            with_top1=True,
            uniform=self.uniform_forwards,
            pack=self.sample_packing,
            prefix=self._mini_batch_prefix,
            token_mask=loss_mask,
        )
        per_token, _ = self.sft_loss_fn(
            logprobs, logprobs.detach(), torch.zeros_like(logprobs), self.algorithm_config, loss_mask
        )
        loss = reduce_loss(per_token, loss_mask, LossReduction.TOKEN_MEAN, normalizer=info.loss_normalizer)
        metrics = {
            "loss": loss.item(),
            "token_accuracy": float((top1 * loss_mask).sum()) / info.num_tokens,
            "num_tokens": float(loss_mask.sum()),
        }
        return loss * self._supervised_weight, metrics

    @torch.no_grad()
    def fold_adapter(self) -> None:
        """Add the LoRA adapter's update ``s·B·A`` into the base weights and start a fresh adapter (``A`` drawn again as
        ``model.lora.init_method`` says, ``B`` zero): the policy computes what it did, and the model with the adapter
        off (the KL reference of a LoRA policy) is now this policy instead of the model it was loaded from. What a warm
        start does before RL (``trainer.warm_start_reference=warm_start``)."""
        from peft.tuners.lora.layer import LoraLayer

        if not self.uses_lora:
            raise ValueError("fold_adapter needs a LoRA policy")
        for module in self.model.modules():
            if not isinstance(module, LoraLayer):
                continue
            for name in module.active_adapters:
                if name in module.lora_A:
                    weight = module.get_base_layer().weight
                    weight += module.get_delta_weight(name).to(weight.dtype)
                    module.reset_lora_parameters(name, self.model.peft_config[name].init_lora_weights)
        self.weight_version.bump()
        self.base_weights_folded = True

    # ----------------------------------------------------------------------------------------- loss

    def _loss_normalizer(self, loss_masks: list[torch.Tensor]) -> float:
        if self._supervised:
            return compute_loss_normalizer(loss_masks, LossReduction.TOKEN_MEAN)
        algo = self.algorithm_config
        return compute_loss_normalizer(loss_masks, algo.loss_reduction, algo.max_seq_len)

    def _reduce(self, per_token: torch.Tensor, loss_mask: torch.Tensor, info: MiniBatchInfo) -> torch.Tensor:
        return reduce_loss(per_token, loss_mask, self.algorithm_config.loss_reduction, normalizer=info.loss_normalizer)

    def _micro_batch_loss(
        self, micro_batch: TrainingInputBatch, info: MiniBatchInfo
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if self._supervised:
            return self._sft_micro_batch_loss(micro_batch, info)
        algo = self.algorithm_config
        loss_mask = micro_batch["loss_mask"]
        logprobs, entropy = response_logprobs(
            self.model,
            micro_batch["sequences"],
            micro_batch["attention_mask"],
            loss_mask.shape[1],
            self.temperature,
            with_entropy=True,
            entropy_grad=algo.use_entropy_loss,
            uniform=self.uniform_forwards,
            pack=self.sample_packing,
            prefix=self._mini_batch_prefix,
            token_mask=loss_mask,
        )
        old_logprobs = micro_batch["action_log_probs"]
        if self._old_logprobs_from_forward:
            old_logprobs.copy_(logprobs.detach())  # a view of the batch's tensor: fills it for the update metrics
        rollout_logprobs = micro_batch.get("rollout_logprobs")
        result = call_policy_loss(
            self.policy_loss_fn,
            logprobs,
            old_logprobs,
            micro_batch["advantages"],
            config=algo,
            loss_mask=loss_mask,
            rollout_logprobs=rollout_logprobs,
        )
        per_token_loss, loss_metrics = result
        if result.reduced and self.corrects_off_policy:
            raise ValueError(
                f"trainer.algorithm.policy_loss_type={algo.policy_loss_type!r} returns a reduced (0-dim) loss, which "
                "trainer.algorithm.off_policy_correction cannot correct token by token: return the per-token loss "
                "[B, T] (reduced by trainer.algorithm.loss_reduction), or turn the correction off"
            )
        correction = None
        if self.corrects_off_policy:
            correction = correction_factor(old_logprobs, rollout_logprobs, loss_mask, algo.off_policy_correction)
            per_token_loss = per_token_loss * correction.factor
        if result.reduced:  # the loss's own mean over this micro-batch: weighted by its share of the mini-batch's rows
            policy_loss = per_token_loss * (loss_mask.shape[0] / info.num_rows)
        else:
            policy_loss = self._reduce(per_token_loss, loss_mask, info)
        entropy_term = self._reduce(entropy, loss_mask, info)
        loss = policy_loss - algo.entropy_loss_coef * entropy_term if algo.use_entropy_loss else policy_loss
        metrics = {
            "policy_loss": policy_loss.item(),
            "policy_entropy": entropy_term.item(),
            "response_length": float(micro_batch["response_mask"].sum()) / info.num_rows,
        }
        ref_logprobs = micro_batch.get("base_action_log_probs")
        if ref_logprobs is not None:
            kl_input = logprobs if algo.use_kl_loss else logprobs.detach()
            per_token_kl = compute_approx_kl(kl_input, ref_logprobs, loss_mask, algo.kl_estimator_type)
            kl = self._reduce(per_token_kl, loss_mask, info)
            kl_only = micro_batch.get("kl_only")
            if algo.use_kl_loss and kl_only is not None:
                loss = loss + self._reduce(per_token_kl * self._kl_coefs(kl_only), loss_mask, info)
            elif algo.use_kl_loss:
                loss = loss + algo.kl_loss_coef * kl
            metrics["policy_kl"] = kl.item()
        elif algo.use_kl_loss:
            raise KeyError("use_kl_loss is set but the batch has no base_action_log_probs (ref logprobs)")
        metrics["final_loss"] = loss.item()
        metrics.update(_health_metrics(logprobs.detach(), old_logprobs, loss_mask, loss_metrics, info))
        if correction is not None:
            metrics.update(_correction_metrics(correction.stats, info))
        return loss, metrics

    def _kl_coefs(self, kl_only: torch.Tensor) -> torch.Tensor:
        """[B, 1]: each row's KL coefficient: ``zero_variance_kl_coef`` (if set) on the rows kept for the KL alone."""
        algo = self.algorithm_config
        anchor = algo.kl_loss_coef if algo.zero_variance_kl_coef is None else algo.zero_variance_kl_coef
        coefs = torch.full(kl_only.shape, algo.kl_loss_coef, dtype=torch.float32, device=kl_only.device)
        return coefs.masked_fill(kl_only, anchor).unsqueeze(-1)

    def _adds_no_gradient(self, micro_batch: TrainingInputBatch) -> bool:
        """A built-in policy loss is zero, and so is its gradient, on tokens whose advantage is zero; a KL or entropy
        term is not (unless the loss mask is all zero)."""
        no_loss_token = super()._adds_no_gradient(micro_batch)
        if no_loss_token or self._supervised:  # the SFT loss has no advantage
            return no_loss_token
        algo = self.algorithm_config
        if algo.use_kl_loss or algo.use_entropy_loss or algo.policy_loss_type not in ZERO_AT_ZERO_ADVANTAGE:
            return False
        return not bool(micro_batch["advantages"][micro_batch["loss_mask"] > 0].any())

    def _finalize_step_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        if "ratio_sq_dev_mean" in metrics:
            # Var(r) = E[(r − 1)²] − (E[r] − 1)²: centred on 1, so on-policy ratios give exactly 0.
            sq_dev_mean = metrics.pop("ratio_sq_dev_mean")
            metrics["ratio_std"] = math.sqrt(max(sq_dev_mean - (metrics["ratio_mean"] - 1.0) ** 2, 0.0))
        finalize_is_ratio_std(metrics, prefix=LOSS_METRICS_PREFIX)
        return metrics

    def ppo_train(
        self,
        batch: TrainingInputBatch,
        mini_batch_size: int,
        micro_batch_size: int,
        update_epochs: int = 1,
        *,
        sft_batch: TrainingInputBatch | None = None,
    ) -> dict[str, float]:
        """See `TrainableWorker.ppo_train`.

        ``sft_batch`` (conversations tokenised for SFT) adds the ptx term to every optimizer step of the update: the
        gradient of ``trainer.algorithm.ptx_coef`` times their SFT loss (``sft_train``'s), computed under the
        weights of that step; ``ptx_loss`` and ``ptx_token_accuracy`` report it, averaged over the steps.

        A batch without ``action_log_probs`` must get exactly one optimizer step (one epoch, one mini-batch): that
        step is taken after every micro-batch's backward, so the weights of the update's own forward ARE the old
        policy, and its detached logprobs serve as the old logprobs (saving a separate forward pass over the batch;
        ``PPOTrainer`` relies on this). Only when the training forward is random (dropout, see
        ``has_active_dropout``) would those differ from the eval-mode old logprobs: the worker then computes them
        with ``compute_logprobs`` first, and says so in a warning. ``old_logprobs_from_update_forward`` (1.0 / 0.0)
        reports which way they were obtained.
        """
        if self.corrects_off_policy and batch.get("rollout_logprobs") is None:
            raise ValueError(
                "trainer.algorithm.off_policy_correction is on but the batch has no rollout_logprobs: the inference "
                "engine returned no logprobs of the sampled tokens (generator.sampling_params.logprobs must be 0, and "
                "a custom generator must fill GeneratorOutput.rollout_logprobs)"
            )
        batch = batch.to(self.device)
        from_forward = "action_log_probs" not in batch
        if from_forward:
            if update_epochs != 1 or mini_batch_size < batch.batch_size:
                raise ValueError(
                    "the batch has no action_log_probs (old logprobs), which is only valid for a single optimizer "
                    f"step; got update_epochs={update_epochs}, mini_batch_size={mini_batch_size} for "
                    f"{batch.batch_size} rows"
                )
            if self.stochastic_forward:
                logger.warning(
                    "the policy has dropout, so its training forward is not the old policy's: computing the old "
                    "logprobs with a separate eval-mode forward inside the update"
                )
                batch["action_log_probs"] = self._logprobs(batch, micro_batch_size)
                from_forward = False
            else:
                batch["action_log_probs"] = torch.zeros_like(batch["loss_mask"], dtype=torch.float32)
        self._old_logprobs_from_forward = from_forward
        self._ptx_batch = None if sft_batch is None else sft_batch.to(self.device)
        try:
            metrics = super().ppo_train(batch, mini_batch_size, micro_batch_size, update_epochs)
        finally:
            self._old_logprobs_from_forward = False
            self._ptx_batch = None
        metrics[f"{self.metric_prefix}old_logprobs_from_update_forward"] = float(from_forward)
        return metrics

    def _update_metrics(
        self, batch: TrainingInputBatch, steps: list[tuple[dict[str, float], bool]]
    ) -> dict[str, float]:
        metrics = {"degenerate_update": float(_is_degenerate(steps))}
        if metrics["degenerate_update"]:
            logger.warning(
                "DEGENERATE POLICY UPDATE: every importance ratio of this update was identical although the "
                "weights were stepped with lr > 0 before later forward passes; the policy never moved. Check that "
                "the old logprobs come from the pre-update weights, that the optimizer holds the parameters the "
                "forward uses, and the learning rate."
            )
        if batch.get("rollout_logprobs") is not None:
            whole = TrainingInputBatch.cat(
                self._gather(batch.select(["rollout_logprobs", "action_log_probs", "loss_mask"]))
            )
            metrics.update(
                rollout_train_logprob_diff(whole["rollout_logprobs"], whole["action_log_probs"], whole["loss_mask"])
            )
        return metrics

    # ----------------------------------------------------------------------------------------- export

    def save_checkpoint(self, folder: str | Path) -> None:
        """`TrainableWorker.save_checkpoint`; with LoRA also the adapter in peft's format in ``ADAPTER_DIR``."""
        super().save_checkpoint(folder)
        if self.uses_lora:
            self.write_adapter(self.trainable_state_dict(), Path(folder) / ADAPTER_DIR)

    def export_hf(self, folder: str | Path) -> None:
        """Save a plain transformers model (LoRA merged into a copy of the weights) plus the tokenizer; with LoRA also
        the adapter in peft's format in ``ADAPTER_DIR`` beside it."""
        model = copy.deepcopy(self.model).merge_and_unload() if self.uses_lora else self.model
        model.save_pretrained(folder)
        self._tokenizer().save_pretrained(folder)
        if self.uses_lora:
            self.write_adapter(self.trainable_state_dict(), Path(folder) / ADAPTER_DIR)

    def write_adapter(self, state: dict[str, torch.Tensor], folder: Path) -> None:
        """Write the adapter weights `state` (`trainable_state_dict`) as a folder that ``PeftModel.from_pretrained(
        base, folder)`` loads (`skyrl_train.models.lora.write_peft_adapter`); an empty `state` (an fsdp2 rank other
        than 0, which holds no gathered weights) writes nothing, and so does a policy whose base weights a warm start
        changed (`base_weights_folded`)."""
        if state and not self.base_weights_folded:
            write_peft_adapter(state, folder, self.lora_config, self.model_path)


@torch.no_grad()
def _health_metrics(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_metrics: dict[str, float],
    info: MiniBatchInfo,
) -> dict[str, float]:
    """Additive contributions of one micro-batch to the step's ratio / KL statistics (see module docstring)."""
    valid = loss_mask > 0
    num_valid = int(valid.sum())
    if num_valid == 0:
        return {}
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = log_ratio[valid].double().exp()
    weight = num_valid / info.num_tokens
    metrics = {
        "ratio_mean": ratio.sum().item() / info.num_tokens,
        "ratio_sq_dev_mean": (ratio - 1.0).square().sum().item() / info.num_tokens,
        "ratio_min": ratio.min().item(),
        "ratio_max": ratio.max().item(),
        "approx_kl_old": compute_approx_kl(logprobs, old_logprobs, loss_mask, "k3").sum().item() / info.num_tokens,
    }
    for key, value in loss_metrics.items():
        metrics[f"{LOSS_METRICS_PREFIX}{key}"] = value if key.endswith(("_min", "_max")) else value * weight
    return metrics


def _correction_metrics(stats: OffPolicyStats, info: MiniBatchInfo) -> dict[str, float]:
    """Additive contributions of one micro-batch's off-policy statistics: token sums over the mini-batch's loss
    tokens, row sums over its rows with a loss token; ``_min`` / ``_max`` as they are."""
    shares = stats.shares(info.num_tokens, info.num_sequences)
    return {f"{LOSS_METRICS_PREFIX}{key}": value for key, value in shares.items()}


def _is_degenerate(steps: list[tuple[dict[str, float], bool]]) -> bool:
    """True if a forward pass ran after a weight-changing step and all ratios of the update were identical."""
    first_change = next((i for i, (_, changed) in enumerate(steps) if changed), None)
    if first_change is None or first_change == len(steps) - 1:
        return False
    lows = [metrics["ratio_min"] for metrics, _ in steps if "ratio_min" in metrics]
    highs = [metrics["ratio_max"] for metrics, _ in steps if "ratio_max" in metrics]
    return bool(lows) and min(lows) == max(highs)
