"""`PPOTrainer`: the training loop, in upstream's order.

Per step: generate -> `postprocess_generator_output` (upstream's hook for a subclass to change rewards or loss
masks) -> reward metrics and the infrastructure-failure check -> optional dynamic sampling (more
prompt batches until the training batch is full) -> training batch (infrastructure failures out of the
baseline) -> ref / old logprobs (and values) -> optional KL-in-reward -> advantages (broadcast over the turns of
a trajectory in step-wise mode; optional batch normalisation) -> critic then policy updates on contiguous
mini-batches -> checkpoint -> weight sync -> eval -> log. The weights are also synced once before anything is
generated (after a resume), so remote engines start from the run's weights. Steps are 1-based; an eval before
training is logged at step 0. Every step's metrics are flushed to every tracker before the next step starts, so
a crash never loses the metrics of completed steps.

A local engine takes turns with the trainer (`EngineTurns`, upstream SkyRL's order): it sleeps from the end of a
step's generation through the update and the checkpoint; a weight sync wakes its weights alone, then sends them; its
KV cache wakes when the next generation starts.

A generation batch in which more than `trainer.max_infra_failure_ratio` of the trajectories ended in an
infrastructure failure stops the run (`InfraFailureError`, with the count per stop reason and a sample error):
training on what is left would learn from a broken setup, not from the task.

Memory: every logged step carries `memory/peak_rss_gb`, the process's peak resident memory during that step (its
generation, update, checkpoint and eval), and `memory/rss_gb` at its end; the eval logged at step 0 carries them for
everything before it (model loading included). See `skyrl_train.utils.memory`.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from skyrl_train.algorithms import (
    apply_kl_penalty,
    compute_advantages_and_returns,
    compute_step_wise_advantages,
    get_kl_controller,
    normalize_advantages_over_batch,
    trajectory_sums,
)
from skyrl_train.checkpoints import CheckpointError, CheckpointManager, step_dir_name
from skyrl_train.config import to_dict
from skyrl_train.dataset import PromptDataLoader
from skyrl_train.distributed.sharding import rows_with_loss
from skyrl_train.dynamic_sampling import DynamicSampler
from skyrl_train.evaluate import evaluate
from skyrl_train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput
from skyrl_train.inference_engines.base import InferenceEngineInterface
from skyrl_train.models.hub import push_folder
from skyrl_train.models.lora import ADAPTER_DIR
from skyrl_train.storage import EvalDumpUploader
from skyrl_train.tracking import Tracking, step_progress
from skyrl_train.tracking.metric_keys import BASE_EVAL_PREFIX
from skyrl_train.trainer_parts import current as current_trainer_parts
from skyrl_train.trainer_utils import (
    Rollouts,
    build_training_batch,
    prepare_generator_input,
    reward_metrics,
    zero_negative_hinted_advantages,
)
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.utils.memory import PeakRSS, release_free_memory
from skyrl_train.utils.openmp import release_openmp_threads
from skyrl_train.utils.plain_data import load_plain, save_plain
from skyrl_train.utils.redact import redact_secrets
from skyrl_train.workers.protocols import Critic, Policy, Reference

logger = logging.getLogger(__name__)

TRAINER_STATE_FILE = "trainer_state.pt"
DATA_STATE_FILE = "data.pt"
TRAINED_PROMPTS_KEY = "trained_prompts"
"""The key of an asynchronous run's data state (`fully_async_trainer.PromptStream`) listing the trained prompts of its
open epochs; the synchronous loop refuses such a state."""
PTX_STATE_KEY = "ptx"
"""The key of the data state holding the position in the ptx term's conversations (`trainer.algorithm.ptx_coef`)."""


class InfraFailureError(RuntimeError):
    """Too many trajectories of one generation batch ended in infrastructure failures to go on training."""


class TrainingRun:
    """What the RL and the SFT trainer share: committing the run's state as a checkpoint, restoring it, exporting the
    policy. A subclass has ``cfg``, ``tracker``, ``policy``, ``checkpoints`` (a `CheckpointManager`), ``export_path``,
    ``global_step`` and ``data_state`` / ``load_data_state`` (its loader's position); ``critic`` and
    ``kl_controller`` are None in a run without them."""

    critic: Critic | None = None
    kl_controller: Any = None

    def save_checkpoint(self, step_metrics: dict[str, Any] | None = None) -> Path:
        """Commit the run's state at `global_step`, with `step_metrics`, the step's metrics so far: a run killed after
        the commit but before the step's metrics were logged logs them on resume (`_begin`). Every file holds plain
        data (`skyrl_train.utils.plain_data`); the config in `TRAINER_STATE_FILE` (what `export_hf` rebuilds the
        policy from) has its secrets redacted (`redact_secrets`), as the checkpoint may be uploaded or shared."""

        def write(folder: Path) -> None:
            self.policy.save_checkpoint(folder / "policy")
            if self.critic is not None:
                self.critic.save_checkpoint(folder / "critic")
            save_plain(self.data_state(), folder / DATA_STATE_FILE)
            state = {
                "global_step": self.global_step,
                "config": redact_secrets(to_dict(self.cfg)),
                "step_metrics": redact_secrets(dict(step_metrics or {})),
                "tracking": self.tracker.state(),  # the W&B / MLflow run ids a resumed run continues
            }
            if self.kl_controller is not None:
                state["kl_coef"] = self.kl_controller.value
            save_plain(state, folder / TRAINER_STATE_FILE)

        path = self.checkpoints.save(self.global_step, write)
        logger.info("saved checkpoint %s", path)
        return path

    def load_checkpoint(self, folder: Path) -> dict[str, Any]:
        """Restore the run's state from `folder`; returns the metrics its step had when it was committed."""
        state = load_plain(folder / TRAINER_STATE_FILE)
        self.global_step = int(state["global_step"])
        if folder.name != step_dir_name(self.global_step):
            logger.warning("%s holds trainer state of step %d", folder, self.global_step)
        self.policy.load_checkpoint(folder / "policy")
        if self.critic is not None:
            self.critic.load_checkpoint(folder / "critic")
        if self.kl_controller is not None and "kl_coef" in state:
            self.kl_controller.value = state["kl_coef"]
        self.tracker.resume(state.get("tracking") or {})
        try:
            self.load_data_state(load_plain(folder / DATA_STATE_FILE))
        except ValueError as exc:
            logger.warning("data loader state not restored (%s): the epoch restarts from its first batch", exc)
        logger.info("resumed from %s at step %d", folder, self.global_step)
        return state.get("step_metrics") or {}

    def export_hf(self) -> Path:
        """Export the policy (`Policy.export_hf`); with `trainer.push_to_hub`, push its PEFT adapter (LoRA) or the
        merged model to `trainer.hub_model_id`."""
        path = self.export_path / step_dir_name(self.global_step) / "policy"
        self.policy.export_hf(path)
        t = self.cfg.trainer
        if t.push_to_hub:
            adapter = path / ADAPTER_DIR
            push_folder(adapter if adapter.is_dir() else path, t.hub_model_id, step_dir_name(self.global_step))
        return path


class PPOTrainer(TrainingRun):
    """Owns the loop; the models live in workers, rollouts come from the generator.

    `policy`, `ref` (or None) and `critic` (or None) are workers as `skyrl_train.workers.protocols` describes them
    (`Policy` / `Reference` / `Critic`: single-process workers or fsdp2 worker groups). `await
    sync_weights(weight_version)` brings the engines to the policy's weights, labelled `weight_version` (the global
    step whose update produced them; e.g. `WeightSyncSender.sync`): once before the first generation and after every
    update. With `inference_engine` given (a local engine; remote ones only receive the syncs), the engine sleeps
    while the trainer trains and wakes as `EngineTurns` says, so it releases its memory and drops prefix KV computed
    with weights that are about to change. `checkpoints` saves and resumes (with its sink, e.g. S3; default: local
    folders under `trainer.ckpt_path`) and `eval_dumps` uploads eval dumps (`BasePPOExp.get_checkpoint_manager` /
    `get_eval_dump_uploader` build both from the config).
    """

    def __init__(
        self,
        cfg,
        tracker: Tracking,
        tokenizer,
        train_loader: PromptDataLoader,
        eval_loader: PromptDataLoader | None,
        generator: GeneratorInterface,
        policy: Policy,
        ref: Reference | None = None,
        critic: Critic | None = None,
        sync_weights=None,
        inference_engine: InferenceEngineInterface | None = None,
        checkpoints: CheckpointManager | None = None,
        eval_dumps: EvalDumpUploader | None = None,
    ):
        self.cfg = cfg
        self.tracker = tracker
        self.tokenizer = tokenizer
        self.train_loader = train_loader
        self.eval_loader = eval_loader
        self.generator = generator
        self.policy, self.ref, self.critic = policy, ref, critic
        self.sync_weights = sync_weights or _no_sync
        self.inference_engine = inference_engine
        self.engine_turns = EngineTurns(inference_engine)
        t = cfg.trainer
        self.checkpoints = checkpoints or CheckpointManager(t.ckpt_path, t.max_ckpts_to_keep, t.ckpt_interval)
        self.eval_dumps = eval_dumps
        self.export_path = Path(t.export_path).expanduser()
        self.total_steps = len(train_loader) * t.epochs
        self.global_step = 0
        self.kl_controller = get_kl_controller(t.algorithm) if t.algorithm.use_kl_in_reward else None
        sampling = t.algorithm.dynamic_sampling
        self.dynamic_sampler = (
            DynamicSampler(sampling, t.train_batch_size, t.seed) if sampling.type is not None else None
        )
        self.warm_start = None
        """SFT on the policy before the first RL step (`trainer.warm_start`; `skyrl_train.sft.warm_start`). Built now:
        its data is read and checked before anything trains."""
        if t.warm_start:
            from skyrl_train.sft.warm_start import WarmStart  # imports this module

            self.warm_start = WarmStart(cfg, tokenizer, policy, ref)

    # ------------------------------------------------------------------------------------------ loop

    async def train(self) -> None:
        """Resume, train every step, save and export; the checkpoint sink is closed however it ends."""
        try:
            await self._train()
        finally:
            self.checkpoints.sink.close()

    async def _train(self) -> None:
        t = self.cfg.trainer
        memory = await self._begin()
        start_epoch = self.train_loader.epoch  # restored with the checkpoint; with dynamic sampling a step draws more
        progress = step_progress(self.total_steps, initial=self.global_step, desc="train")
        metrics: dict[str, Any] = {}
        drawn: list[Rollouts] = []
        for epoch in range(start_epoch, t.epochs):
            for batch in self.train_loader:
                if not drawn:  # `timing/step` spans the step's generation (every batch drawn for it) to its end
                    step_start = time.perf_counter()
                drawn.append(await self.generate(batch, metrics))
                rollouts = drawn[-1]
                if self.dynamic_sampler is not None:
                    rollouts = self.dynamic_sampler.add(rollouts)
                    if rollouts is None:
                        continue
                    metrics.update(self.dynamic_sampler.metrics())
                metrics.update(self._generation_metrics(drawn))
                drawn = []
                self.global_step += 1
                metrics.update({"trainer/epoch": epoch, "trainer/global_step": self.global_step})
                await self._step_and_bookkeeping(rollouts, metrics)
                metrics["timing/step"] = time.perf_counter() - step_start
                metrics.update(memory.metrics())
                self.tracker.log(metrics, step=self.global_step)
                metrics = {}
                progress.update(1)
        progress.close()
        await self._end(memory)

    async def _begin(self) -> PeakRSS:
        """Resume, the first weight sync and the eval before training; returns the run's memory meter."""
        t = self.cfg.trainer
        await self.engine_turns.to_trainer()  # before the resume: loading a checkpoint is the trainer's turn
        resume_from = self.checkpoints.resolve_resume(t.resume_mode, t.resume_path)
        warm_start_metrics = await self._warm_start(resuming=resume_from is not None)
        eval_now = t.eval_before_train
        if resume_from is not None:
            # The step's metrics, and its eval if one was due, may not have been logged before the run stopped: both
            # again (a step's later row wins in metrics.jsonl).
            step_metrics = self.load_checkpoint(resume_from)
            if step_metrics:  # none in a final checkpoint or one written before they were kept
                self.tracker.log(step_metrics, step=self.global_step)
            eval_now = eval_now or self._eval_due(self.global_step)
            if self.global_step >= self.total_steps:
                logger.warning(
                    "%s is at step %d of %d: nothing left to train (trainer.resume_mode=none or another "
                    "trainer.ckpt_path starts a new run)",
                    resume_from,
                    self.global_step,
                    self.total_steps,
                )
        if warm_start_metrics:  # after `load_checkpoint`, which resumes the trackers' runs before anything is logged
            self.tracker.log(warm_start_metrics, step=0)
        await self._sync_weights(self.global_step)  # engines holding their own weights generate with the resumed ones
        memory = PeakRSS()  # its first interval runs from the process start: model loading counts in it
        if t.eval_interval > 0 and eval_now and self.eval_loader is not None:
            self.tracker.log({**await self.eval(), **memory.metrics()}, step=self.global_step)
        return memory

    async def _warm_start(self, resuming: bool) -> dict[str, Any]:
        """`trainer.warm_start` (`skyrl_train.sft.warm_start`): restore a saved one, or evaluate the model as loaded
        (`trainer.eval_before_train`, not when resuming), run it and switch to RL; returns the metrics to log at step
        0 (none after a restore)."""
        if self.warm_start is None or self.warm_start.restore():
            return {}
        if resuming:
            logger.warning("no saved warm start in %s: running it again before the resume", self.warm_start.folder)
        t = self.cfg.trainer
        metrics: dict[str, Any] = {}
        if t.eval_before_train and t.eval_interval > 0 and self.eval_loader is not None and not resuming:
            from skyrl_train.sft.warm_start import BASE_EVAL_DIR

            await self._sync_weights(0)
            base = await self.eval(dump_name=BASE_EVAL_DIR)
            metrics.update({BASE_EVAL_PREFIX + key.removeprefix("eval/"): value for key, value in base.items()})
            await self.engine_turns.to_trainer()
        with self._timer("warm_start", metrics):
            metrics.update(self.warm_start.run())
        return metrics

    async def _end(self, memory: PeakRSS) -> None:
        """The eval the loop missed, the final checkpoint and the HF export."""
        t = self.cfg.trainer
        if self._final_eval_missed():
            self.tracker.log({**await self.eval(), **memory.metrics()}, step=self.global_step)
        await self.engine_turns.to_trainer()  # the final checkpoint and export, as upstream
        if t.ckpt_interval > 0 and self.global_step % t.ckpt_interval != 0:
            self.save_checkpoint()
        self.export_hf()

    def _final_eval_missed(self) -> bool:
        """With dynamic sampling the last step comes before `total_steps` (prompt batches are drawn without a
        step), so the eval that `eval_interval` schedules at the last step is run after the loop instead."""
        t = self.cfg.trainer
        at_last_step = self.global_step % t.eval_interval == 0 or self.global_step == self.total_steps
        return self.eval_loader is not None and t.eval_interval > 0 and self.global_step > 0 and not at_last_step

    async def _step_and_bookkeeping(self, rollouts: Rollouts, metrics: dict[str, Any]) -> None:
        """One training step, then checkpoint / HF export / weight sync / eval as their intervals say."""
        t = self.cfg.trainer
        step = self.global_step
        await self.engine_turns.to_trainer()
        metrics.update(await self.train_step(rollouts))
        release_free_memory()  # the update's activations, before generation allocates on the engine's thread
        if t.ckpt_interval > 0 and step % t.ckpt_interval == 0:
            with self._timer("save_checkpoints", metrics):
                self.save_checkpoint(metrics)
        if t.hf_save_interval > 0 and step % t.hf_save_interval == 0:
            with self._timer("save_hf_model", metrics):
                self.export_hf()
        with self._timer("sync_weights", metrics):
            await self._sync_weights(step)
        if self.eval_loader is not None and self._eval_due(step):
            with self._timer("eval", metrics):
                metrics.update(await self.eval())

    def _eval_due(self, step: int) -> bool:
        """Whether `eval_interval` schedules an eval after `step` (every interval, and the last step)."""
        t = self.cfg.trainer
        return t.eval_interval > 0 and step > 0 and (step % t.eval_interval == 0 or step == self.total_steps)

    def train_generator_input(self, batch: dict[str, list]) -> tuple[GeneratorInput, list[str]]:
        """The generator input of training prompts `batch` (`n_samples_per_prompt` rows per prompt, the training
        sampling params, batch metadata of the next step) and the rows' prompt uids."""
        cfg = self.cfg
        return prepare_generator_input(
            batch,
            cfg.generator.n_samples_per_prompt,
            cfg.generator.sampling_params,
            cfg.environment.env_class,
            "train",
            self.global_step + 1,
        )

    async def generate(self, batch: dict[str, list], metrics: dict[str, Any]) -> Rollouts:
        """Generate `n_samples_per_prompt` trajectories per prompt of `batch`, adding the generation time and token
        counts to `metrics` (summed over the batches drawn for one step). Raises `InfraFailureError` when too many
        trajectories ended in infrastructure failures."""
        cfg = self.cfg
        generator_input, uids = self.train_generator_input(batch)
        with self._timer("generate", metrics, accumulate=True):
            await self._to_generation()
            output = await self.generator.generate(generator_input)
        with self._timer("postprocess_generator_output", metrics, accumulate=True):
            rollouts = self.postprocessed_rollouts(generator_input, uids, output)
        output = rollouts.output
        tokens = metrics.get("generate/rollout_tokens", 0) + sum(len(ids) for ids in output["response_ids"])
        metrics["generate/rollout_tokens"] = tokens
        metrics["generate/rollout_tokens_per_s"] = tokens / max(metrics["timing/generate"], 1e-9)
        metrics.update(output.get("rollout_metrics") or {})  # a custom generator's own keys
        check_infra_failures(rollouts, cfg.trainer.max_infra_failure_ratio)
        return rollouts

    def postprocess_generator_output(self, generator_output: GeneratorOutput, uids: list[str]) -> GeneratorOutput:
        """Upstream's hook on every training generation (not eval), before anything reads it: a subclass may change
        the rewards or loss masks (e.g. DAPO's overlong penalty) and returns the output the step reports and trains
        on. `uids`: each output row's prompt uid. The reward metrics and per-token rewards that upstream's base
        computes here are computed from its result (`Rollouts`), so the base returns the output unchanged."""
        return generator_output

    def postprocessed_rollouts(
        self, generator_input: GeneratorInput, uids: list[str], output: GeneratorOutput
    ) -> Rollouts:
        """`output` after `postprocess_generator_output`, aligned with its input (`Rollouts.from_generation`)."""
        rows = Rollouts.from_generation(generator_input, uids, output).uids  # checks the rows before the hook reads
        return Rollouts.from_generation(generator_input, uids, self.postprocess_generator_output(output, list(rows)))

    def _generation_metrics(self, drawn: list[Rollouts]) -> dict[str, float]:
        """Rollout and reward metrics over every trajectory generated for the step: with dynamic sampling, the
        groups that were dropped count too (they are what the policy did)."""
        everything = Rollouts.concatenate(drawn)
        n = self.cfg.generator.n_samples_per_prompt
        metrics = everything.rollout_metrics()
        metrics.update(_prefixed("reward", _train_reward_names(reward_metrics(everything, n), n)))
        return metrics

    async def train_step(self, rollouts: Rollouts) -> dict[str, Any]:
        """Learn from one batch of generated trajectories; returns the step's metrics."""
        return self.update(rollouts)

    def update(self, rollouts: Rollouts) -> dict[str, Any]:
        """`train_step`'s work, which blocks until the update is done (the asynchronous trainer runs it in a
        thread, so that its event loop goes on generating)."""
        cfg, algo = self.cfg, self.cfg.trainer.algorithm
        metrics: dict[str, Any] = {}
        with self._timer("convert_to_training_input", metrics):
            training_batch, batch_metrics = build_training_batch(
                rollouts, self.tokenizer.pad_token_id, algo.zero_variance_filter, algo.zero_variance_kl_rows
            )
        metrics.update(batch_metrics)
        metrics["trainer/response_tokens"] = float(training_batch["response_mask"].sum())

        rows = training_batch.batch_size
        policy_rows = self._mini_batch_rows(cfg.trainer.policy_mini_batch_size, rows)
        micro_fwd = cfg.trainer.micro_forward_batch_size_per_gpu
        old_logprobs_forward = not self._old_logprobs_from_update(policy_rows, rows)
        if self.critic is not None or self.ref is not None or old_logprobs_forward:
            with self._timer("fwd_logprobs_values_reward", metrics):  # only when one of these forwards runs
                if self.critic is not None:
                    training_batch["values"] = self.critic.compute_values(training_batch, micro_fwd)
                if self.ref is not None:
                    training_batch["base_action_log_probs"] = self._ref_logprobs(training_batch, micro_fwd)
                if old_logprobs_forward:
                    training_batch["action_log_probs"] = self.policy.compute_logprobs(training_batch, micro_fwd)
        if self.kl_controller is not None:
            metrics.update(self._apply_kl_in_reward(training_batch))

        with self._timer("compute_advantages_and_returns", metrics):
            training_batch["advantages"], training_batch["returns"] = self._advantages(training_batch, rollouts.uids)
            if training_batch.get("kl_only") is not None:
                training_batch["advantages"][training_batch["kl_only"]] = 0.0
            if cfg.trainer.algorithm.hinted_rows_positive_only:
                metrics.update(zero_negative_hinted_advantages(training_batch, rollouts))
        metrics.update(_advantage_metrics(training_batch))
        if cfg.trainer.dump_data_batch:
            dump_dir = self.export_path / "dumped_data"
            dump_dir.mkdir(parents=True, exist_ok=True)
            training_batch.save(dump_dir / f"global_step_{self.global_step}_training_input.pkl")

        micro = cfg.trainer.micro_train_batch_size_per_gpu
        epochs = cfg.trainer.update_epochs_per_batch
        ptx_batch = self.warm_start.next_ptx_batch() if self.warm_start is not None else None
        ptx = {} if ptx_batch is None else {"sft_batch": ptx_batch}  # the ptx term: single-process policies only
        with self._timer("train_critic_and_policy", metrics):
            if self.critic is not None:
                with self._timer("critic_train", metrics):
                    critic_rows = self._mini_batch_rows(cfg.trainer.critic_mini_batch_size, rows)
                    metrics.update(self.critic.ppo_train(training_batch, critic_rows, micro, epochs))
            with self._timer("policy_train", metrics):
                metrics.update(self.policy.ppo_train(training_batch, policy_rows, micro, epochs, **ptx))
        return metrics

    def _ref_logprobs(self, batch: TrainingInputBatch, micro_batch_size: int) -> torch.Tensor:
        """Reference logprobs ``[B, R]``. The KL loss and the KL in the reward both read them under the loss mask, so
        only the rows with a loss token need them: rows without one (groups `zero_variance_filter` dropped, failed
        trajectories) stay out of the forward and get 0."""
        rows = rows_with_loss(batch["loss_mask"], self.ref.world_size)
        if len(rows) == batch.batch_size:
            return self.ref.compute_logprobs(batch, micro_batch_size)
        logprobs = torch.zeros(batch["response_mask"].shape, dtype=torch.float32)
        if len(rows):
            logprobs[rows] = self.ref.compute_logprobs(batch[rows], micro_batch_size)
        return logprobs

    def _advantages(self, batch, uids: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        algo = self.cfg.trainer.algorithm
        inputs = dict(
            token_level_rewards=batch["rewards"],
            response_mask=batch["response_mask"],
            index=uids,
            values=batch.get("values"),
            gamma=algo.gamma,
            lambd=algo.lambd,
            grpo_norm_by_std=algo.grpo_norm_by_std,
            baseline_mask=batch["baseline_mask"],
            config=algo,
        )
        if batch.get("is_last_step") is not None:
            advantages, returns = compute_step_wise_advantages(
                algo.advantage_estimator, is_last_step=batch["is_last_step"], **inputs
            )
        else:
            advantages, returns = compute_advantages_and_returns(algo.advantage_estimator, **inputs)
        if algo.advantage_batch_normalize:
            advantages = normalize_advantages_over_batch(advantages, batch["loss_mask"])
        return advantages, returns

    def _mini_batch_rows(self, mini_batch_size: int, rows: int) -> int:
        """Rows per optimizer step: `mini_batch_size` prompts' worth of the batch. A batch holds
        `train_batch_size x n_samples_per_prompt` rows, or more in step-wise mode (a row per turn), where the
        batch still gets `train_batch_size / mini_batch_size` optimizer steps."""
        return math.ceil(rows * mini_batch_size / self.cfg.trainer.train_batch_size)

    def _old_logprobs_from_update(self, mini_batch_rows: int, rows: int) -> bool:
        """True when the batch gets exactly one optimizer step (one epoch, one mini-batch) and no KL-in-reward: the
        old logprobs then equal the update's own forward pass, so the policy worker takes them from it (detached)
        instead of a separate forward over the whole batch, which would cost as much as the update's forward.
        The worker reports it as ``policy/old_logprobs_from_update_forward``; ``timing/fwd_logprobs_values_reward``
        is then logged only if a ref or critic forward runs."""
        t = self.cfg.trainer
        return t.update_epochs_per_batch == 1 and mini_batch_rows >= rows and self.kl_controller is None

    async def _sync_weights(self, weight_version: int) -> None:
        """The engine's weights awake (and its KV cache asleep), then the sync."""
        await self.engine_turns.wake_weights()
        await self.sync_weights(weight_version)

    async def _to_generation(self) -> None:
        """The engine's turn: this thread's OpenMP workers are released first, as a local engine's thread computes
        now (`release_openmp_threads`), then the engine's KV cache wakes."""
        if self.inference_engine is not None:
            release_openmp_threads()
        await self.engine_turns.to_generation()

    async def eval(self, dump_name: str | None = None) -> dict[str, float]:
        """One eval of the current policy; dumps (`trainer.dump_eval_results`) go to `dumped_evals/global_step_N_evals/`
        and S3, or to `dumped_evals/<dump_name>/` only."""
        dump_dir = None
        if self.cfg.trainer.dump_eval_results:
            dump_dir = self.export_path / "dumped_evals" / (dump_name or f"global_step_{self.global_step}_evals")
        await self._to_generation()
        metrics = await evaluate(self.eval_loader, self.generator, self.cfg, self.global_step, self.tokenizer, dump_dir)
        if dump_dir is not None and self.eval_dumps is not None and dump_name is None:
            self.eval_dumps.upload(dump_dir, self.global_step)
        return metrics

    # ------------------------------------------------------------------------------------ checkpoints

    def data_state(self) -> dict[str, Any]:
        """Where in the training data the run is, as a checkpoint stores it (`DATA_STATE_FILE`); with a ptx term
        also where in the warm start's conversations (under `PTX_STATE_KEY`)."""
        state = self.train_loader.state_dict()
        if self.warm_start is not None and self.warm_start.ptx_loader is not None:
            state[PTX_STATE_KEY] = self.warm_start.ptx_loader.state_dict()
        return state

    def load_data_state(self, state: dict[str, Any]) -> None:
        """Resume at `state` (`data_state` of the checkpoint); raises `ValueError` when it does not apply.

        Raises:
            CheckpointError: an asynchronous run's state, whose loader position would train prompts of its open epoch
                that were trained already a second time.
        """
        if TRAINED_PROMPTS_KEY in state:
            raise CheckpointError(
                "the checkpoint's data state was written by asynchronous training (trainer.fully_async."
                "max_staleness_steps > 0): resume it asynchronously, which knows which prompts of its epoch were trained"
            )
        state = dict(state)
        ptx_state = state.pop(PTX_STATE_KEY, None)
        self.train_loader.load_state_dict(state)
        ptx_loader = self.warm_start.ptx_loader if self.warm_start is not None else None
        if ptx_loader is not None and ptx_state is not None:
            ptx_loader.load_state_dict(ptx_state)
        elif ptx_loader is not None:
            logger.warning("the checkpoint has no position in the ptx term's conversations: they start over")

    # --------------------------------------------------------------------------------------- helpers

    def _apply_kl_in_reward(self, batch) -> dict[str, float]:
        algo = self.cfg.trainer.algorithm
        rewards, current_kl = apply_kl_penalty(
            batch["rewards"],
            batch["action_log_probs"],
            batch["base_action_log_probs"],
            batch["loss_mask"],
            kl_coef=self.kl_controller.value,
            kl_estimator_type=algo.kl_estimator_type,
        )
        batch["rewards"] = rewards
        coef = self.kl_controller.value
        self.kl_controller.update(current_kl, n_steps=batch.batch_size)
        return {"loss/avg_kl": float(current_kl), "loss/kl_loss_coef": float(coef)}

    @contextmanager
    def _timer(self, phase: str, metrics: dict[str, Any], accumulate: bool = False):
        """Time the block into `timing/<phase>` (added to what is there with `accumulate`)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            key = f"timing/{phase}"
            metrics[key] = (metrics.get(key, 0.0) if accumulate else 0.0) + time.perf_counter() - start


class RayPPOTrainer(PPOTrainer):
    """`PPOTrainer` under upstream SkyRL's name, built from upstream's arguments: what a script's `get_trainer`
    override has (`BasePPOExp.get_trainer`), e.g. ``DAPOTrainer(cfg=cfg, tracker=tracker, ...)`` for a subclass that
    overrides `postprocess_generator_output`. The workers, loaders, weight sync and checkpoints come from the run being
    built (`skyrl_train.trainer_parts`); `train_dataset`, `eval_dataset`, `inference_engine_client` and
    `colocate_pg` (None here: the strategy places the engines) are kept as attributes under upstream's names."""

    def __init__(
        self,
        cfg,
        tracker: Tracking,
        tokenizer,
        train_dataset,
        inference_engine_client: InferenceEngineInterface,
        generator: GeneratorInterface,
        colocate_pg=None,
        eval_dataset=None,
    ):
        if cfg.trainer.fully_async.max_staleness_steps > 0:
            raise ValueError(
                "trainer.fully_async.max_staleness_steps > 0 trains with FullyAsyncPPOTrainer, and get_trainer "
                f"returned {type(self).__name__}, which trains synchronously: set it to 0 or build a "
                "FullyAsyncPPOTrainer"
            )
        super().__init__(cfg, tracker, tokenizer, generator=generator, **current_trainer_parts().trainer_kwargs())
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.inference_engine_client = inference_engine_client
        self.colocate_pg = colocate_pg


class EngineTurns:
    """Hands the devices (the process, for the `hf` engine) between a local inference engine and the trainer, in
    upstream SkyRL's order.

    The engine sleeps through the trainer's turn (checkpoint load, the update, checkpoint save, HF export). A weight
    sync needs the weights awake and the KV cache asleep: at vLLM sleep level 2 (full fine-tuning) a sleeping engine's
    weight memory is released, so `wake_weights` wakes them alone (`wake_up(tags=["weights"])`) before the sync. The
    KV cache wakes (`wake_up(tags=["kv_cache"])`) when a generation starts after that, and the engine stays awake
    through every generation (eval, the step's rollouts, dynamic sampling's extra batches) until the trainer's next
    turn. A vLLM engine sleeps both at once and has no way back to its weights but a sync, so generating after a
    sleep without one is refused. Every call is a no-op without an engine (remote engines: nothing to hand over).
    """

    AWAKE, ASLEEP, WEIGHTS_AWAKE = "awake", "asleep", "weights awake"

    def __init__(self, engine: InferenceEngineInterface | None):
        self.engine = engine
        self.state = self.AWAKE
        """A new engine holds its memory."""

    async def to_trainer(self) -> None:
        """The engine sleeps (if it is not asleep yet)."""
        if self.engine is not None and self.state != self.ASLEEP:
            await self.engine.sleep()
            self.state = self.ASLEEP

    async def wake_weights(self) -> None:
        """The engine's weights awake and its KV cache asleep, ready to receive a weight sync."""
        if self.engine is None or self.state == self.WEIGHTS_AWAKE:
            return
        await self.to_trainer()
        await self.engine.wake_up(tags=["weights"])
        self.state = self.WEIGHTS_AWAKE

    async def to_generation(self) -> None:
        """The engine fully awake: its KV cache wakes after a weight sync.

        Raises:
            RuntimeError: the engine sleeps and no weight sync came since (its weights may be released).
        """
        if self.engine is None or self.state == self.AWAKE:
            return
        if self.state == self.ASLEEP:
            raise RuntimeError("the inference engine is asleep: sync the weights before generating")
        await self.engine.wake_up(tags=["kv_cache"])
        self.state = self.AWAKE


async def _no_sync(weight_version: int) -> None:
    return None


def _prefixed(prefix: str, metrics: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}/{key}": value for key, value in metrics.items()}


def _train_reward_names(metrics: dict[str, float], n: int) -> dict[str, float]:
    """Upstream's overall name for pass@n is `reward/avg_pass_at_<n>`; per data source it stays `pass_at_<n>`."""
    return {(f"avg_pass_at_{n}" if key == f"pass_at_{n}" else key): value for key, value in metrics.items()}


def _advantage_metrics(batch) -> dict[str, float]:
    mask = batch["loss_mask"] > 0
    advantages = batch["advantages"][mask]
    returns = batch["rewards"].sum(dim=-1)
    last = batch.get("is_last_step")
    final_rewards = returns if last is None else trajectory_sums(returns, last)
    if advantages.numel() == 0:
        return {"loss/avg_final_rewards": final_rewards.mean().item()}
    return {
        "loss/avg_final_rewards": final_rewards.mean().item(),
        "loss/avg_raw_advantages": advantages.mean().item(),
        "loss/avg_raw_advantages_abs": advantages.abs().mean().item(),
    }


def check_infra_failures(rollouts: Rollouts, max_ratio: float) -> None:
    """Raise `InfraFailureError` if more than `max_ratio` of the trajectories ended in infrastructure failures,
    naming the count per stop reason and one failure's env, prompt and error."""
    rows = rollouts.trajectory_rows()
    failed_rows = [i for i, failed in zip(rows, (rollouts.infra_failed()[i] for i in rows), strict=True) if failed]
    if not rows or len(failed_rows) / len(rows) <= max_ratio:
        return
    reasons = Counter(rollouts.output["stop_reasons"][i] for i in failed_rows)
    sample = failed_rows[0]
    failure = (rollouts.output.get("infra_failures") or [None] * rollouts.num_rows)[sample]
    error = "unknown" if failure is None else failure.error
    raise InfraFailureError(
        f"{len(failed_rows)} of {len(rows)} trajectories ended in infrastructure failures, more than "
        f"trainer.max_infra_failure_ratio={max_ratio}: "
        + ", ".join(f"{reason}: {count}" for reason, count in reasons.most_common())
        + f". First failure (env {rollouts.env_classes[sample]!r}, prompt uid {rollouts.uids[sample]}): {error}"
    )
