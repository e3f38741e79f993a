"""Supervised fine-tuning on conversations: `python -m skyrl_train.entrypoints.main_sft key=value ...`.

Takes the training config (same `--config` presets and overrides, same validation). The data and the SFT loop are the
`sft` block (`sft.train_data`: JSONL / JSON / parquet rows with a chat `messages` list, `sft.eval_data`, `max_length`,
`num_steps` or `num_epochs`, `batch_size`, ...; skyrl-train/docs/sft.md); everything else is the trainer section's:
the model (`trainer.policy.model.path`, LoRA), the optimizer (`trainer.policy.optimizer_config`, `sft.lr` for its
learning rate), `trainer.strategy` (`single` or `fsdp2`), `trainer.micro_train_batch_size_per_gpu`,
`trainer.use_sample_packing`, `trainer.seed`, the loggers, `trainer.ckpt_path` / `ckpt_interval` / `resume_mode`,
`trainer.export_path` / `hf_save_interval` and `trainer.eval_interval` / `eval_before_train` for the eval hook. The
policy is trained alone: no reference model, no critic, whatever `trainer.algorithm` says.

Every row is read and tokenised before the model loads: a bad row stops the run there (exit status 1) with its file,
row and field. The run logs `sft/*` metrics per step (and `eval/sft/*`), checkpoints in the RL layout (resumed with
`trainer.resume_mode=latest`) and exports the policy to `<export_path>/global_step_N/policy`, which
`trainer.policy.model.path` of an RL run can name (`trainer.warm_start` runs both in one job instead).
"""

from __future__ import annotations

import copy
import logging
import sys

from skyrl_train.config import ConfigError, SkyRLConfig
from skyrl_train.entrypoints.main_base import BasePPOExp, _seed_everything, run_cli
from skyrl_train.models.hub import check_hub_access
from skyrl_train.sft.encoding import sft_datasets
from skyrl_train.sft.trainer import SFTTrainer, sft_optimizer_config, total_steps
from skyrl_train.strategies import strategy_for

logger = logging.getLogger(__name__)


def policy_only(cfg: SkyRLConfig) -> SkyRLConfig:
    """``cfg`` for building the SFT run's workers: the policy alone (no KL term, so no reference; no critic), with the
    SFT optimizer (`sft_optimizer_config`)."""
    out = copy.deepcopy(cfg)
    algorithm = out.trainer.algorithm
    algorithm.use_kl_loss = algorithm.use_kl_in_reward = False
    out.trainer.critic.model.path = None
    out.trainer.policy.optimizer_config = sft_optimizer_config(cfg)
    return out


class SFTExp(BasePPOExp):
    """Builds the SFT run from the config and trains; the `get_*` hooks of `BasePPOExp` (tokenizer, tracker,
    checkpoints and their S3 sink) apply as in RL."""

    def __init__(self, cfg: SkyRLConfig):
        super().__init__(cfg)
        self.strategy = strategy_for(policy_only(cfg), s3=self.s3, checkpoints=True)

    def _run(self) -> None:
        cfg, t = self.cfg, self.cfg.trainer
        if not cfg.sft.train_data:
            raise ConfigError(["sft.train_data is empty: there is nothing to fine-tune on."])
        _seed_everything(t.seed)
        if t.push_to_hub:  # as main_base's preflight: before the model loads
            logger.info("preflight: exports push to %s", check_hub_access(t.hub_model_id))
        self.log_device()
        tokenizer = self.get_tokenizer()
        train_data, eval_data = sft_datasets(cfg, tokenizer)
        logger.info(
            "sft: %d training conversations (%d truncated to sft.max_length), %d eval conversations",
            len(train_data),
            train_data.truncated_rows,
            0 if eval_data is None else len(eval_data),
        )
        workers = self.get_workers(total_steps(cfg, len(train_data)))
        try:
            with self.get_tracker() as tracker:
                trainer = SFTTrainer(
                    cfg,
                    tracker,
                    tokenizer,
                    train_data,
                    eval_data,
                    workers.policy,
                    self.get_checkpoint_manager(),
                    eval_interval=t.eval_interval,
                    eval_before_train=t.eval_before_train,
                )
                trainer.train()
        finally:
            self.release_workers(*workers)
        self.write_report()


def run(cfg: SkyRLConfig) -> None:
    """Fine-tune with a validated config."""
    SFTExp(cfg).run()


def main(argv: list[str] | None = None) -> int:
    """Load and validate the config from `argv` overrides (default: sys.argv[1:]), then `run` it."""
    return run_cli(argv, __doc__, run)


if __name__ == "__main__":
    sys.exit(main())
