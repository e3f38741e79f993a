"""`PPOTrainer`: the training loop, in upstream's order.

Per step: generate -> rewards and reward metrics -> training batch (infrastructure failures out of the
baseline) -> ref / old logprobs (and values) -> optional KL-in-reward -> advantages -> critic then policy
updates on contiguous mini-batches -> checkpoint -> weight sync -> eval -> log. Steps are 1-based; an eval
before training is logged at step 0. Every step's metrics are flushed to every tracker before the next
step starts, so a crash never loses the metrics of completed steps.
"""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import torch

from skyrl_train.algorithms import (
    apply_kl_penalty,
    compute_advantages_and_returns,
    get_kl_controller,
)
from skyrl_train.checkpoints import CheckpointManager, S3CheckpointSink, step_dir_name
from skyrl_train.config import to_dict
from skyrl_train.dataset import PromptDataLoader
from skyrl_train.evaluate import evaluate
from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.inference_engines.base import InferenceEngineInterface
from skyrl_train.storage import BackgroundUploader, S3Settings, queue_eval_dump_upload
from skyrl_train.tracking import Tracking, step_progress
from skyrl_train.trainer_utils import build_training_batch, output_uids, prepare_generator_input, reward_metrics

logger = logging.getLogger(__name__)

TRAINER_STATE_FILE = "trainer_state.pt"
DATA_STATE_FILE = "data.pt"


class PPOTrainer:
    """Owns the loop; the models live in workers, rollouts come from the generator.

    `policy`, `ref` (or None) and `critic` (or None) are workers with the `PolicyWorker` / `RefWorker` /
    `CriticWorker` interface; `sync_weights` is called after each update (a no-op when the engine shares the
    policy's module, as the colocated `hf` engine does). With `inference_engine` given, every generation phase
    (training rollouts, eval) runs between its `wake_up()` and `sleep()`, so the engine releases its memory and
    drops prefix KV computed with weights that are about to change.
    """

    def __init__(
        self,
        cfg,
        tracker: Tracking,
        tokenizer,
        train_loader: PromptDataLoader,
        eval_loader: PromptDataLoader | None,
        generator: GeneratorInterface,
        policy,
        ref=None,
        critic=None,
        sync_weights=None,
        inference_engine: InferenceEngineInterface | None = None,
    ):
        if cfg.generator.step_wise_trajectories:
            raise NotImplementedError(
                "generator.step_wise_trajectories=true: the generator emits per-turn rows, but the trainer's "
                "advantage broadcast across the turns of a trajectory is not implemented yet"
            )
        self.cfg = cfg
        self.tracker = tracker
        self.tokenizer = tokenizer
        self.train_loader = train_loader
        self.eval_loader = eval_loader
        self.generator = generator
        self.policy, self.ref, self.critic = policy, ref, critic
        self.sync_weights = sync_weights or (lambda: None)
        self.inference_engine = inference_engine
        t = cfg.trainer
        self.s3 = S3Settings.from_trainer_config(t)
        self.uploader: BackgroundUploader | None = None
        self.eval_store = sink = None
        if self.s3 is not None:
            logger.info("S3 on: %s", self.s3.describe())
            if t.max_ckpts_to_keep != -1:
                logger.warning("trainer.max_ckpts_to_keep is not used with S3 on: trainer.s3.keep_local rotates")
            self.uploader = BackgroundUploader(self.s3.flush_timeout_seconds)
            sink = S3CheckpointSink.from_settings(self.s3, self.uploader)
            self.eval_store = self.s3.store(self.s3.eval_bucket)
        self.checkpoints = CheckpointManager(t.ckpt_path, t.max_ckpts_to_keep, t.ckpt_interval, sink=sink)
        self.export_path = Path(t.export_path).expanduser()
        self.total_steps = len(train_loader) * t.epochs
        self.global_step = 0
        self.kl_controller = get_kl_controller(t.algorithm) if t.algorithm.use_kl_in_reward else None

    # ------------------------------------------------------------------------------------------ loop

    async def train(self) -> None:
        """Resume, train every step, save and export; pending S3 uploads are flushed however it ends."""
        if self.uploader is not None:
            self.uploader.install_exit_handlers()
        try:
            await self._train()
        finally:
            self.close()

    def close(self) -> None:
        """Wait (bounded by trainer.s3.flush_timeout_seconds) for pending uploads, then report what failed."""
        if self.uploader is not None:
            self.uploader.close()
        self.checkpoints.sink.close()

    async def _train(self) -> None:
        t = self.cfg.trainer
        resume_from = self.checkpoints.resolve_resume(t.resume_mode, t.resume_path)
        if resume_from is not None:
            self.load_checkpoint(resume_from)
        if t.eval_interval > 0 and t.eval_before_train and self.eval_loader is not None:
            self.tracker.log(await self.eval(), step=self.global_step)

        start_epoch = self.global_step // len(self.train_loader)
        progress = step_progress(self.total_steps, initial=self.global_step, desc="train")
        for epoch in range(start_epoch, t.epochs):
            for batch in self.train_loader:
                self.global_step += 1
                metrics = {"trainer/epoch": epoch, "trainer/global_step": self.global_step}
                with self._timer("step", metrics):
                    await self._step_and_bookkeeping(batch, metrics)
                self.tracker.log(metrics, step=self.global_step)
                progress.update(1)
        progress.close()
        if t.ckpt_interval > 0 and self.global_step % t.ckpt_interval != 0:
            self.save_checkpoint()
        self.export_hf()

    async def _step_and_bookkeeping(self, batch: dict[str, list], metrics: dict[str, Any]) -> None:
        """One training step, then checkpoint / HF export / weight sync / eval as their intervals say."""
        t = self.cfg.trainer
        step = self.global_step
        metrics.update(await self.train_step(batch))
        if t.ckpt_interval > 0 and step % t.ckpt_interval == 0:
            with self._timer("save_checkpoints", metrics):
                self.save_checkpoint()
        if t.hf_save_interval > 0 and step % t.hf_save_interval == 0:
            with self._timer("save_hf_model", metrics):
                self.export_hf()
        with self._timer("sync_weights", metrics):
            self.sync_weights()
        eval_due = t.eval_interval > 0 and (step % t.eval_interval == 0 or step == self.total_steps)
        if self.eval_loader is not None and eval_due:
            with self._timer("eval", metrics):
                metrics.update(await self.eval())

    async def train_step(self, batch: dict[str, list]) -> dict[str, Any]:
        """Generate, score and learn from one batch of prompts; returns the step's metrics."""
        cfg, algo = self.cfg, self.cfg.trainer.algorithm
        n = cfg.generator.n_samples_per_prompt
        metrics: dict[str, Any] = {}
        with self._timer("generate", metrics):
            generator_input, uids = prepare_generator_input(
                batch, n, cfg.generator.sampling_params, cfg.environment.env_class, "train", self.global_step
            )
            async with self._generation_phase():
                output = await self.generator.generate(generator_input)
        metrics.update(output.get("rollout_metrics") or {})
        uids = output_uids(output, uids)
        data_sources = [extras.get("data_source") for extras in generator_input["env_extras"]]
        metrics.update(_prefixed("reward", _train_reward_names(reward_metrics(output, uids, data_sources, n), n)))

        with self._timer("convert_to_training_input", metrics):
            training_batch, batch_metrics = build_training_batch(
                output, uids, self.tokenizer.pad_token_id, algo.zero_variance_filter
            )
        metrics.update(batch_metrics)
        metrics["trainer/response_tokens"] = float(training_batch["response_mask"].sum())

        micro_fwd = cfg.trainer.micro_forward_batch_size_per_gpu
        with self._timer("fwd_logprobs_values_reward", metrics):
            if self.critic is not None:
                training_batch["values"] = self.critic.compute_values(training_batch, micro_fwd)
            if self.ref is not None:
                training_batch["base_action_log_probs"] = self.ref.compute_logprobs(training_batch, micro_fwd)
            if not self._single_policy_update(len(uids)):
                training_batch["action_log_probs"] = self.policy.compute_logprobs(training_batch, micro_fwd)
        if self.kl_controller is not None:
            metrics.update(self._apply_kl_in_reward(training_batch))

        with self._timer("compute_advantages_and_returns", metrics):
            advantages, returns = compute_advantages_and_returns(
                algo.advantage_estimator,
                token_level_rewards=training_batch["rewards"],
                response_mask=training_batch["response_mask"],
                index=uids,
                values=training_batch.get("values"),
                gamma=algo.gamma,
                lambd=algo.lambd,
                grpo_norm_by_std=algo.grpo_norm_by_std,
                baseline_mask=training_batch["baseline_mask"],
            )
            training_batch["advantages"], training_batch["returns"] = advantages, returns
        metrics.update(_advantage_metrics(training_batch))
        if cfg.trainer.dump_data_batch:
            dump_dir = self.export_path / "dumped_data"
            dump_dir.mkdir(parents=True, exist_ok=True)
            training_batch.save(dump_dir / f"global_step_{self.global_step}_training_input.pkl")

        mini_rows = cfg.trainer.policy_mini_batch_size * n
        micro = cfg.trainer.micro_train_batch_size_per_gpu
        epochs = cfg.trainer.update_epochs_per_batch
        with self._timer("train_critic_and_policy", metrics):
            if self.critic is not None:
                with self._timer("critic_train", metrics):
                    critic_rows = cfg.trainer.critic_mini_batch_size * n
                    metrics.update(self.critic.ppo_train(training_batch, critic_rows, micro, epochs))
            with self._timer("policy_train", metrics):
                metrics.update(self.policy.ppo_train(training_batch, mini_rows, micro, epochs))
        generate_seconds = metrics["timing/generate"]
        metrics["generate/rollout_tokens_per_s"] = metrics["trainer/response_tokens"] / max(generate_seconds, 1e-9)
        return metrics

    def _single_policy_update(self, rows: int) -> bool:
        """True when the batch gets exactly one optimizer step (one epoch, one mini-batch) and no KL-in-reward: the
        old logprobs then equal the update's own forward pass, so the policy worker takes them from it (detached)
        instead of a separate forward over the whole batch, which would cost as much as the update's forward."""
        t = self.cfg.trainer
        mini_rows = t.policy_mini_batch_size * self.cfg.generator.n_samples_per_prompt
        return t.update_epochs_per_batch == 1 and mini_rows >= rows and self.kl_controller is None

    @asynccontextmanager
    async def _generation_phase(self):
        """The inference engine's turn: awake while the block runs, asleep afterwards (the trainer's turn)."""
        if self.inference_engine is None:
            yield
            return
        await self.inference_engine.wake_up()
        try:
            yield
        finally:
            await self.inference_engine.sleep()

    async def eval(self) -> dict[str, float]:
        dump_dir = None
        if self.cfg.trainer.dump_eval_results:
            dump_dir = self.export_path / "dumped_evals" / f"global_step_{self.global_step}_evals"
        async with self._generation_phase():
            metrics = await evaluate(
                self.eval_loader, self.generator, self.cfg, self.global_step, self.tokenizer, dump_dir
            )
        if dump_dir is not None and self.s3 is not None:
            queue_eval_dump_upload(self.uploader, self.eval_store, dump_dir, self.s3.eval_prefix(self.global_step))
        return metrics

    # ------------------------------------------------------------------------------------ checkpoints

    def save_checkpoint(self) -> Path:
        def write(folder: Path) -> None:
            self.policy.save_checkpoint(folder / "policy")
            if self.critic is not None:
                self.critic.save_checkpoint(folder / "critic")
            torch.save(self.train_loader.state_dict(), folder / DATA_STATE_FILE)
            state = {"global_step": self.global_step, "config": to_dict(self.cfg)}
            if self.kl_controller is not None:
                state["kl_coef"] = self.kl_controller.value
            torch.save(state, folder / TRAINER_STATE_FILE)

        path = self.checkpoints.save(self.global_step, write)
        logger.info("saved checkpoint %s", path)
        return path

    def load_checkpoint(self, folder: Path) -> None:
        state = torch.load(folder / TRAINER_STATE_FILE, weights_only=False)
        self.global_step = int(state["global_step"])
        if folder.name != step_dir_name(self.global_step):
            logger.warning("%s holds trainer state of step %d", folder, self.global_step)
        self.policy.load_checkpoint(folder / "policy")
        if self.critic is not None:
            self.critic.load_checkpoint(folder / "critic")
        if self.kl_controller is not None and "kl_coef" in state:
            self.kl_controller.value = state["kl_coef"]
        try:
            self.train_loader.load_state_dict(torch.load(folder / DATA_STATE_FILE, weights_only=False))
        except ValueError as exc:
            logger.warning("data loader state not restored (%s): the epoch restarts from its first batch", exc)
        logger.info("resumed from %s at step %d", folder, self.global_step)

    def export_hf(self) -> Path:
        path = self.export_path / step_dir_name(self.global_step) / "policy"
        self.policy.export_hf(path)
        return path

    # --------------------------------------------------------------------------------------- helpers

    def _apply_kl_in_reward(self, batch) -> dict[str, float]:
        algo = self.cfg.trainer.algorithm
        rewards, current_kl = apply_kl_penalty(
            batch["rewards"],
            batch["action_log_probs"],
            batch["base_action_log_probs"],
            batch["response_mask"],
            kl_coef=self.kl_controller.value,
            kl_estimator_type=algo.kl_estimator_type,
        )
        batch["rewards"] = rewards
        coef = self.kl_controller.value
        self.kl_controller.update(current_kl, n_steps=batch.batch_size)
        return {"loss/avg_kl": float(current_kl), "loss/kl_loss_coef": float(coef)}

    @contextmanager
    def _timer(self, phase: str, metrics: dict[str, Any]):
        start = time.perf_counter()
        try:
            yield
        finally:
            metrics[f"timing/{phase}"] = time.perf_counter() - start


def _prefixed(prefix: str, metrics: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}/{key}": value for key, value in metrics.items()}


def _train_reward_names(metrics: dict[str, float], n: int) -> dict[str, float]:
    """Upstream's overall name for pass@n is `reward/avg_pass_at_<n>`; per data source it stays `pass_at_<n>`."""
    return {(f"avg_pass_at_{n}" if key == f"pass_at_{n}" else key): value for key, value in metrics.items()}


def _advantage_metrics(batch) -> dict[str, float]:
    mask = batch["loss_mask"] > 0
    advantages = batch["advantages"][mask]
    final_rewards = batch["rewards"].sum(dim=-1)
    if advantages.numel() == 0:
        return {"loss/avg_final_rewards": final_rewards.mean().item()}
    return {
        "loss/avg_final_rewards": final_rewards.mean().item(),
        "loss/avg_raw_advantages": advantages.mean().item(),
        "loss/avg_raw_advantages_abs": advantages.abs().mean().item(),
    }
