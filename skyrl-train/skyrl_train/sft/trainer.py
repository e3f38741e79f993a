"""`SFTTrainer`: supervised fine-tuning of the policy worker on conversations.

Per step: the next batch of ``sft.batch_size`` conversations (shuffled per epoch with ``trainer.seed``, as the RL prompt
loader does: the same resumable `PromptDataLoader`) -> ``policy.sft_train`` (the ``cross_entropy`` loss through the
workers' forward/backward: micro-batches of ``trainer.micro_train_batch_size_per_gpu``, sample packing, LoRA or full
fine-tuning, ``single`` or ``fsdp2``) -> checkpoint / HF export / eval as their intervals say -> log. Steps are 1-based;
the run takes ``sft.num_steps`` steps, else ``sft.num_epochs`` passes over the data (the last partial batch of an epoch
is dropped).

Metrics (one definition each, here): ``sft/loss`` (mean ``−logp`` over the batch's assistant tokens), ``sft/
token_accuracy`` (fraction of those tokens that are a most likely token), ``sft/num_tokens`` (assistant tokens),
``sft/tokens_per_s`` (every token of the batch, prompt included, per second of the step), ``sft/grad_norm`` (before
clipping), ``sft/lr``, ``sft/skipped_steps`` (non-finite gradient), ``sft/truncated_rows`` (rows of the batch cut to
``sft.max_length``), ``sft/epoch``, ``timing/step`` and the memory metrics; the eval hook logs ``eval/sft/loss`` and
``eval/sft/token_accuracy`` over every conversation of ``sft.eval_data``.

Checkpoints have the RL trainer's layout and code (`skyrl_train.trainer.TrainingRun`): ``global_step_N/`` with
``policy/``, the loader position and the trainer state, so a resumed run takes exactly the batches the interrupted one
had not and continues the same loss curve; HF exports go to ``<export_path>/global_step_N/policy`` (pushed to the Hub
with ``trainer.push_to_hub``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from functools import partial
from pathlib import Path
from typing import Any

from skyrl_train.checkpoints import CheckpointManager
from skyrl_train.config.schema import OptimizerConfig
from skyrl_train.config.validate import policy_dp_size
from skyrl_train.dataset import PromptDataLoader
from skyrl_train.sft.encoding import SFTDataset, collate
from skyrl_train.tracking import Tracking, step_progress
from skyrl_train.trainer import TrainingRun
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.utils.memory import PeakRSS
from skyrl_train.workers.protocols import Policy

__all__ = ["SFTTrainer", "sft_optimizer_config", "total_steps"]

logger = logging.getLogger(__name__)


def sft_optimizer_config(cfg) -> OptimizerConfig:
    """The SFT steps' optimizer: ``trainer.policy.optimizer_config`` with ``sft.lr`` as its learning rate when set."""
    optimizer = cfg.trainer.policy.optimizer_config
    return optimizer if cfg.sft.lr is None else dataclasses.replace(optimizer, lr=cfg.sft.lr)


def total_steps(cfg, conversations: int) -> int:
    """Optimizer steps of an SFT run on ``conversations`` conversations: ``sft.num_steps``, else ``sft.num_epochs``
    passes of whole batches."""
    s = cfg.sft
    return s.num_steps or conversations // s.batch_size * s.num_epochs


class SFTTrainer(TrainingRun):
    """Owns the SFT loop; the model lives in ``policy`` (a `Policy` worker of either strategy).

    ``checkpoints`` saves, resumes and exports (None: none of them, as in a warm start); ``eval_interval`` and
    ``eval_before_train`` schedule the eval hook as ``trainer.eval_interval`` / ``trainer.eval_before_train`` do in RL
    (an eval also runs after the last step; -1: only there).
    """

    def __init__(
        self,
        cfg,
        tracker: Tracking,
        tokenizer,
        train_data: SFTDataset,
        eval_data: SFTDataset | None,
        policy: Policy,
        checkpoints: CheckpointManager | None = None,
        *,
        eval_interval: int = -1,
        eval_before_train: bool = False,
    ):
        s, t = cfg.sft, cfg.trainer
        self.cfg, self.tracker, self.policy, self.checkpoints = cfg, tracker, policy, checkpoints
        self.eval_interval, self.eval_before_train = eval_interval, eval_before_train
        self.batch = partial(collate, pad_token_id=tokenizer.pad_token_id)
        self.loader = PromptDataLoader(train_data, s.batch_size, seed=t.seed, collate_fn=self.batch)
        if len(self.loader) == 0:
            raise ValueError(
                f"sft.train_data has {len(train_data)} conversations, fewer than sft.batch_size={s.batch_size}: no "
                "step would run"
            )
        self.total_steps = total_steps(cfg, len(train_data))
        self.eval_data = eval_data
        self.dp = policy_dp_size(cfg)
        self.micro_batch_size = t.micro_train_batch_size_per_gpu
        self.export_path = Path(t.export_path).expanduser()
        self.global_step = 0

    # ------------------------------------------------------------------------------------------ loop

    def train(self) -> dict[str, Any]:
        """Resume, train every step (with checkpoints, exports and evals as configured), save, export; returns the
        last step's metrics."""
        try:
            return self._train()
        finally:
            if self.checkpoints is not None:
                self.checkpoints.sink.close()

    def _train(self) -> dict[str, Any]:
        t = self.cfg.trainer
        if self.checkpoints is not None:
            resume_from = self.checkpoints.resolve_resume(t.resume_mode, t.resume_path)
            step_metrics = self.load_checkpoint(resume_from) if resume_from is not None else None
            if step_metrics:  # they may not have been logged before the run stopped
                self.tracker.log(step_metrics, step=self.global_step)
        memory = PeakRSS()
        if self.eval_before_train and self.eval_data is not None and self.global_step < self.total_steps:
            self.tracker.log({**self.evaluate(), **memory.metrics()}, step=self.global_step)
        progress = step_progress(self.total_steps, initial=self.global_step, desc="sft")
        metrics: dict[str, Any] = {}
        while self.global_step < self.total_steps:
            for batch in self.loader:
                metrics = self.step(batch)
                metrics.update(memory.metrics())
                self.tracker.log(metrics, step=self.global_step)
                progress.update(1)
                if self.global_step == self.total_steps:
                    break
        progress.close()
        if self.checkpoints is not None:
            if t.ckpt_interval > 0 and self.global_step % t.ckpt_interval:
                self.save_checkpoint()
            self.export_hf()
        return metrics

    def step(self, batch: TrainingInputBatch) -> dict[str, Any]:
        """Train on ``batch``, then checkpoint / export / eval as their intervals say; the step's metrics."""
        t = self.cfg.trainer
        start = time.perf_counter()
        epoch = self.loader.epoch if self.loader.position else self.loader.epoch - 1  # the epoch the batch came from
        trained = self.policy.sft_train(batch, self.micro_batch_size)
        seconds = time.perf_counter() - start
        self.global_step += 1
        metrics: dict[str, Any] = {f"sft/{key}": value for key, value in trained.items()}
        metrics["sft/tokens_per_s"] = float(batch["attention_mask"].sum()) / max(seconds, 1e-9)
        metrics["sft/truncated_rows"] = float(batch["truncated"].sum())
        metrics["sft/epoch"] = epoch
        if self.checkpoints is not None and t.ckpt_interval > 0 and self.global_step % t.ckpt_interval == 0:
            self.save_checkpoint(metrics)
        if self.checkpoints is not None and t.hf_save_interval > 0 and self.global_step % t.hf_save_interval == 0:
            self.export_hf()
        if self._eval_due():
            metrics.update(self.evaluate())
        metrics["timing/step"] = time.perf_counter() - start
        return metrics

    def _eval_due(self) -> bool:
        if self.eval_data is None:
            return False
        interval = self.eval_interval
        return self.global_step == self.total_steps or (interval > 0 and self.global_step % interval == 0)

    def evaluate(self) -> dict[str, float]:
        """``eval/sft/loss`` and ``eval/sft/token_accuracy`` over every conversation of the eval data (exact means over
        all their assistant tokens)."""
        size = self.cfg.sft.batch_size
        totals = {"loss": 0.0, "token_accuracy": 0.0, "num_tokens": 0.0}
        for start in range(0, len(self.eval_data), size):
            batch = self._padded(self.batch(self.eval_data.examples[start : start + size]))
            part = self.policy.sft_eval(batch, self.micro_batch_size)
            for key in ("loss", "token_accuracy"):  # per-batch means over its tokens -> sums
                totals[key] += part[key] * part["num_tokens"]
            totals["num_tokens"] += part["num_tokens"]
        tokens = max(totals["num_tokens"], 1.0)
        return {"eval/sft/loss": totals["loss"] / tokens, "eval/sft/token_accuracy": totals["token_accuracy"] / tokens}

    def _padded(self, batch: TrainingInputBatch) -> TrainingInputBatch:
        """``batch`` with copies of its first row, out of the loss, up to a multiple of the data-parallel size (every
        rank gets an equal part)."""
        missing = -batch.batch_size % self.dp
        if not missing:
            return batch
        filler = TrainingInputBatch.cat([batch[[0]]] * missing)
        filler["loss_mask"] = filler["loss_mask"].zero_()
        return TrainingInputBatch.cat([batch, filler])

    # ------------------------------------------------------------------------------------ checkpoints

    def data_state(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_data_state(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)
