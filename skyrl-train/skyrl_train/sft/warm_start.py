"""The warm start (``trainer.warm_start``): supervised fine-tuning of the policy before the first RL step of a
``main_base`` job, then the switch to RL.

What happens (`PPOTrainer` drives it at the start of training):

1. When the trainer is built, ``sft.train_data`` (and ``sft.eval_data``) are read and tokenised (`sft_datasets`): a bad
   row stops the job before anything trains.
2. With ``trainer.eval_before_train`` and eval data, the model as loaded is evaluated first; its metrics are logged at
   step 0 as ``eval_base/<data_source>/<metric>`` and its trajectories dumped to
   ``<export_path>/dumped_evals/base_evals/`` (local only), beside the usual eval before RL at step 0, which then
   measures the warm-started policy.
3. `SFTTrainer` runs the SFT steps on the policy worker with an optimizer of their own (``trainer.policy.
   optimizer_config`` with ``sft.lr``); their metrics (``sft/loss``, ...) go to a tracker of their own, written to
   ``<export_path>/warm_start/`` (``metrics.jsonl``, report), and the RL run logs ``warm_start/*`` at step 0.
4. The switch to RL, by ``trainer.warm_start_reference``:

   - ``warm_start`` (default; what DeepSeek-R1 and TRL users do when GRPO starts from an SFT checkpoint): the KL
     reference is the warm-started policy. With LoRA the warm-start adapter is folded into the base weights and RL
     trains a fresh adapter on top (`PolicyWorker.fold_adapter`), so the adapter-off reference is the warm start;
     without LoRA the separate reference model takes the policy's weights.
   - ``base``: the reference stays the model as loaded. With LoRA, RL goes on training the warm-start adapter (the
     adapter-off model is the base); without LoRA the reference keeps its own weights.

   RL then trains with the policy's own optimizer, untouched by the SFT steps (no moments, its full LR schedule).
5. With checkpoints on (``trainer.ckpt_interval > 0``) the policy's weights after the switch are saved once to
   ``<ckpt_path>/warm_start/``. A resumed run loads them instead of repeating the SFT steps (a LoRA checkpoint holds
   only the adapter, and after a fold the base weights are the warm start's); where they are missing (a new node
   resuming from S3) the warm start runs again before the RL checkpoint loads.
6. With ``trainer.algorithm.ptx_coef > 0`` the conversations stay in RL: each RL update adds the SFT loss of the next
   ``trainer.algorithm.ptx_batch_size`` of them, times ``ptx_coef``, to every optimizer step (the ptx term of
   InstructGPT and OpenRLHF; `PolicyWorker.ppo_train`'s ``sft_batch``), so that RL keeps what the warm start taught
   while it learns the rest. Their own loader, reshuffled every pass with ``trainer.seed``, resumes with the RL
   checkpoint's data state.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

from safetensors.torch import load_model, save_model

from skyrl_train.dataset import PromptDataLoader
from skyrl_train.sft.encoding import collate, sft_datasets
from skyrl_train.sft.trainer import SFTTrainer, sft_optimizer_config
from skyrl_train.tracking import Tracking
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.utils.fs import fsync_tree, remove_tree, replace_dir

__all__ = ["BASE_EVAL_DIR", "WARM_START_DIR", "WarmStart"]

logger = logging.getLogger(__name__)

WARM_START_DIR = "warm_start"
"""Under ``trainer.ckpt_path``: the policy after the warm start; under ``trainer.export_path``: the SFT steps' metrics
and report."""
BASE_EVAL_DIR = "base_evals"
"""Under ``<export_path>/dumped_evals/``: the eval of the model before the warm start."""
WEIGHTS_FILE = "model.safetensors"
LAST_STEP_METRICS = {
    "sft/loss": "warm_start/loss",
    "sft/token_accuracy": "warm_start/token_accuracy",
    "eval/sft/loss": "warm_start/eval_loss",
    "eval/sft/token_accuracy": "warm_start/eval_token_accuracy",
}
"""The SFT run's last-step metrics the RL run logs at step 0, by their names there."""


class WarmStart:
    """The warm start of one RL run: its data (read and checked on construction), the SFT steps and the switch to RL
    (module docstring). ``policy`` is a single-process `PolicyWorker`, ``ref`` its `RefWorker` or None."""

    def __init__(self, cfg, tokenizer, policy, ref):
        self.cfg, self.tokenizer, self.policy, self.ref = cfg, tokenizer, policy, ref
        self.train_data, self.eval_data = sft_datasets(cfg, tokenizer)
        t = cfg.trainer
        self.folder = Path(t.ckpt_path).expanduser() / WARM_START_DIR
        self.export_path = Path(t.export_path).expanduser() / WARM_START_DIR
        to_warm_start = t.warm_start_reference == "warm_start"
        self.fold = policy.uses_lora and to_warm_start
        self.reference_takes_policy = ref is not None and not policy.uses_lora and to_warm_start
        a = t.algorithm
        self.ptx_loader: PromptDataLoader | None = None
        """The conversations of the ptx term during RL (step 6 of the module docstring); None without one."""
        if a.ptx_coef > 0:
            self.ptx_loader = PromptDataLoader(
                self.train_data,
                a.ptx_batch_size,
                seed=t.seed,
                collate_fn=partial(collate, pad_token_id=tokenizer.pad_token_id),
            )
            if len(self.ptx_loader) == 0:
                raise ValueError(
                    f"sft.train_data has {len(self.train_data)} conversations, fewer than "
                    f"trainer.algorithm.ptx_batch_size={a.ptx_batch_size}: the ptx term would have none"
                )

    def next_ptx_batch(self) -> TrainingInputBatch | None:
        """The ptx term's conversations for the next RL update (one pass after another), or None without a ptx term."""
        if self.ptx_loader is None:
            return None
        return next(iter(self.ptx_loader))

    def restore(self) -> bool:
        """Load the policy as a previous run of this job left it after its warm start (``<ckpt_path>/warm_start/``),
        and the reference from it as the switch does; False (nothing loaded) when there is none."""
        weights = self.folder / WEIGHTS_FILE
        if not weights.is_file():
            return False
        load_model(self.policy.model, weights)  # bumps the model's `WeightVersion`
        self.policy.base_weights_folded = self.fold
        if self.reference_takes_policy:
            self.ref.copy_weights(self.policy.model.state_dict())
        logger.info("warm start: restored the warm-started policy from %s", weights)
        return True

    def run(self) -> dict[str, Any]:
        """The SFT steps, then the switch to RL (and its save); returns the RL run's ``warm_start/*`` metrics."""
        t = self.cfg.trainer
        tracker = Tracking(
            t.project_name, f"{t.run_name}_warm_start", backends=t.logger, config=self.cfg, output_dir=self.export_path
        )
        with tracker:
            trainer = SFTTrainer(self.cfg, tracker, self.tokenizer, self.train_data, self.eval_data, self.policy)
            with self.policy.separate_optimizer(sft_optimizer_config(self.cfg), trainer.total_steps):
                last = trainer.train()
        self._write_report()
        if self.fold:
            self.policy.fold_adapter()
        if self.reference_takes_policy:
            self.ref.copy_weights(self.policy.model.state_dict())
        if t.ckpt_interval > 0:
            self._save()
        metrics = {"warm_start/steps": trainer.global_step, "warm_start/conversations": len(self.train_data)}
        metrics.update({name: last[key] for key, name in LAST_STEP_METRICS.items() if key in last})
        return metrics

    def _save(self) -> None:
        staging = self.folder.with_name(f".{WARM_START_DIR}.partial")
        remove_tree(staging)
        staging.mkdir(parents=True)
        save_model(self.policy.model, str(staging / WEIGHTS_FILE))
        fsync_tree(staging)
        replace_dir(staging, self.folder)
        logger.info("warm start: saved the warm-started policy to %s", self.folder)

    def _write_report(self) -> None:
        metrics_file = self.export_path / "metrics.jsonl"
        if metrics_file.exists():
            from skyrl_train.tracking.report import write_report

            write_report(metrics_file, self.export_path / "report")
