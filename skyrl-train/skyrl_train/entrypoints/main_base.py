"""Train with the base config: `python -m skyrl_train.entrypoints.main_base key=value ...`.

Arguments are Hydra-style overrides of `skyrl_train/config/ppo_base_config.yaml` (`key=value`,
`+key=value`, `~key`); see `skyrl-train/docs/config_reference.md`. An invalid config exits with
status 2 and every problem, by key, on stderr.

To customise a run, subclass `BasePPOExp` and override its `get_*` hooks (as with upstream SkyRL).
Environments declared by installed packages (entry-point group `skyrl_gym.envs`) need no custom main.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from skyrl_train.config import ConfigError, SkyRLConfig, load_config
from skyrl_train.dataset import PromptDataLoader, PromptDataset
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.inference_engines.base import InferenceEngineInterface
from skyrl_train.models import load_tokenizer
from skyrl_train.tracking import Tracking
from skyrl_train.trainer import PPOTrainer
from skyrl_train.workers import CriticWorker, PolicyWorker, RefWorker

if TYPE_CHECKING:
    from skyrl_train.serve import PolicyEndpoint

logger = logging.getLogger(__name__)


class BasePPOExp:
    """Builds every part of a run from the config, then trains. Each `get_*` method is an extension hook."""

    def __init__(self, cfg: SkyRLConfig):
        self.cfg = cfg
        self.export_path = Path(cfg.trainer.export_path).expanduser()

    def get_tokenizer(self):
        return load_tokenizer(self.cfg.trainer.policy.model.path)

    def get_train_dataset(self, tokenizer) -> PromptDataset:
        return PromptDataset(self.cfg.data.train_data, tokenizer, self.cfg.trainer.max_prompt_length)

    def get_eval_dataset(self, tokenizer) -> PromptDataset | None:
        if not self.cfg.data.val_data or self.cfg.trainer.eval_interval <= 0:
            return None
        return PromptDataset(self.cfg.data.val_data, tokenizer, self.cfg.trainer.max_prompt_length)

    def get_tracker(self) -> Tracking:
        t = self.cfg.trainer
        return Tracking(t.project_name, t.run_name, backends=t.logger, config=self.cfg, output_dir=self.export_path)

    def get_workers(self, num_training_steps: int) -> tuple[PolicyWorker, RefWorker | None, CriticWorker | None]:
        t = self.cfg.trainer
        if t.strategy != "single":
            raise NotImplementedError(f"trainer.strategy={t.strategy!r} is not available yet; use 'single'")
        common = dict(
            num_training_steps=num_training_steps,
            gradient_checkpointing=t.gradient_checkpointing,
            gradient_checkpointing_use_reentrant=t.gradient_checkpointing_use_reentrant,
            dtype="bfloat16" if t.bf16 else "float32",
        )
        policy = PolicyWorker(
            t.policy, t.algorithm, temperature=self.cfg.generator.sampling_params.temperature, **common
        )
        needs_ref = t.algorithm.use_kl_loss or t.algorithm.use_kl_in_reward
        ref = RefWorker.for_policy(policy, t.ref) if needs_ref else None
        critic = CriticWorker(t.critic, t.algorithm, **common) if t.critic.model.path else None
        return policy, ref, critic

    def get_inference_engine(self, policy: PolicyWorker, tokenizer) -> InferenceEngineInterface:
        g = self.cfg.generator
        if not g.run_engines_locally or g.backend != "hf":
            raise NotImplementedError(
                f"generator.backend={g.backend!r} (run_engines_locally={g.run_engines_locally}) is not available yet; "
                "use generator.backend=hf"
            )
        from skyrl_train.inference_engines.hf_engine import DEFAULT_PREFIX_CACHE_BYTES, HFInferenceEngine

        return HFInferenceEngine(
            policy.model,
            tokenizer,
            max_num_seqs=g.max_num_seqs,
            seed=self.cfg.trainer.seed,
            prefix_cache_bytes=DEFAULT_PREFIX_CACHE_BYTES if g.enable_prefix_caching else 0,
        )

    def get_generator(self, engine: InferenceEngineInterface, tokenizer) -> SkyRLGymGenerator:
        return SkyRLGymGenerator(self.cfg.generator, self.cfg.environment.skyrl_gym, engine, tokenizer)

    def get_http_endpoint(self, engine: InferenceEngineInterface, tokenizer) -> PolicyEndpoint | None:
        """The OpenAI-compatible endpoint over the live policy (`generator.enable_http_endpoint`), or None. It
        serves while the trainer generates; see `skyrl_train.serve.endpoint`."""
        g = self.cfg.generator
        if not g.enable_http_endpoint:
            return None
        from skyrl_train.serve import PolicyEndpoint

        return PolicyEndpoint(
            engine,
            tokenizer,
            served_model_name=g.served_model_name or g.model_name,
            host=g.http_endpoint_host,
            port=g.http_endpoint_port,
        )

    def run(self) -> None:
        t = self.cfg.trainer
        _seed_everything(t.seed)
        tokenizer = self.get_tokenizer()
        train_loader = PromptDataLoader(self.get_train_dataset(tokenizer), t.train_batch_size, seed=t.seed)
        eval_dataset = self.get_eval_dataset(tokenizer)
        eval_loader = PromptDataLoader.for_eval(eval_dataset, t.eval_batch_size) if eval_dataset else None
        if len(train_loader) == 0:
            raise ValueError(
                f"data.train_data has fewer prompts than trainer.train_batch_size={t.train_batch_size} "
                "(after prompt-length filtering): no training step would run"
            )
        optimizer_steps = len(train_loader) * t.epochs * (t.train_batch_size // t.policy_mini_batch_size)
        policy, ref, critic = self.get_workers(optimizer_steps * t.update_epochs_per_batch)
        engine = self.get_inference_engine(policy, tokenizer)
        generator = self.get_generator(engine, tokenizer)
        endpoint = self.get_http_endpoint(engine, tokenizer)
        if endpoint is not None:
            generator = endpoint.serve_during_generation(generator)
        with self.get_tracker() as tracker:
            trainer = PPOTrainer(
                self.cfg,
                tracker,
                tokenizer,
                train_loader,
                eval_loader,
                generator,
                policy,
                ref,
                critic,
                inference_engine=engine,
            )
            try:
                if endpoint is not None:
                    endpoint.start()
                    logger.info(
                        "serving the live policy as %r at %s/v1 while the trainer generates",
                        endpoint.served_model_name,
                        endpoint.url,
                    )
                asyncio.run(trainer.train())
            finally:
                if endpoint is not None:
                    endpoint.stop()
                asyncio.run(engine.teardown())
        self.write_report()

    def write_report(self) -> None:
        metrics_file = self.export_path / "metrics.jsonl"
        if metrics_file.exists():
            from skyrl_train.tracking.report import write_report

            write_report(metrics_file, self.export_path / "report")
            logger.info("run report written to %s", self.export_path / "report")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run(cfg: SkyRLConfig) -> None:
    """Train with a validated config."""
    BasePPOExp(cfg).run()


def main(argv: list[str] | None = None) -> int:
    """Load and validate the config from `argv` overrides (default: sys.argv[1:]), then `run` it."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    try:
        cfg = load_config(args)
    except ConfigError as e:
        print(f"Invalid config: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
