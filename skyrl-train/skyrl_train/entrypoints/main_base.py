"""Train with the base config: `python -m skyrl_train.entrypoints.main_base key=value ...`.

Arguments are preset files (`--config preset.yaml`, repeatable, e.g. `examples/gsm8k/grpo.yaml`: YAML with the base
config's nesting) and Hydra-style overrides (`key=value`, `+key=value`, `~key`) of
`skyrl_train/config/ppo_base_config.yaml`; presets apply in order, then the overrides. See
`skyrl-train/docs/config_reference.md`. An invalid config exits with status 2 and every problem, by key (and preset
file), on stderr. The run logs, once, every key that differs from the base config and which preset or override set it.

To customise a run, subclass `BasePPOExp` and override its `get_*` hooks. Upstream SkyRL's own scripts run
unchanged: `@hydra.main(config_path=config_dir, config_name="ppo_base_config")`, `validate_cfg(cfg)` on hydra's
DictConfig, `skyrl_train.utils.initialize_ray(cfg)` and a `@ray.remote` task that runs `BasePPOExp(cfg)` (or a subclass
overriding upstream's hooks with their signatures); see `skyrl-train/docs/extending.md`. Environments declared by
installed packages (entry-point group `skyrl_gym.envs`) need no custom main.

Before the model loads, every env named by the data is resolved and initialised on a few rows of each data
source (`skyrl_train.preflight`): an unknown env id, a row the env cannot read or a missing file in an env config
stops the run there (exit status 1) with the env, file and row. During training, a generation batch with more than
`trainer.max_infra_failure_ratio` infrastructure failures stops it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from skyrl_train.checkpoints import CheckpointError, CheckpointManager, ResumeMode
from skyrl_train.config import (
    CONFIG_DIR,
    ConfigError,
    SkyRLConfig,
    added_keys,
    build_config,
    config_changes,
    format_config_changes,
    resolve_config,
    split_cli_args,
)
from skyrl_train.config import validate_cfg as validate_typed_cfg
from skyrl_train.dataset import DatasetValidationError, PromptDataLoader, PromptDataset
from skyrl_train.entrypoints.ray_task import configure_logging
from skyrl_train.fully_async_trainer import FullyAsyncPPOTrainer
from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.inference_engines.base import InferenceEngineInterface
from skyrl_train.models import load_tokenizer
from skyrl_train.models.hub import HubPushError, check_hub_access
from skyrl_train.preflight import PreflightError, check_envs
from skyrl_train.storage import BackgroundUploader, EvalDumpUploader, S3CheckpointSink, S3Settings
from skyrl_train.strategies import strategy_for
from skyrl_train.tracking import Tracking
from skyrl_train.trainer import InfraFailureError, PPOTrainer
from skyrl_train.trainer_parts import TrainerParts, building_trainer
from skyrl_train.trainer_parts import current as current_trainer_parts
from skyrl_train.utils.plain_data import NotPlainDataError
from skyrl_train.utils.redact import redact_secrets
from skyrl_train.workers.protocols import Critic, Policy, Reference, Workers

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from skyrl_train.serve import PolicyEndpoint
    from skyrl_train.weight_sync import WeightSyncSender

logger = logging.getLogger(__name__)

__all__ = ["BasePPOExp", "config_dir", "main", "run", "run_cli", "validate_cfg"]

config_dir = str(CONFIG_DIR)
"""The folder of `ppo_base_config.yaml`, for upstream's `@hydra.main(config_path=config_dir,
config_name="ppo_base_config")`."""


def validate_cfg(cfg: SkyRLConfig | DictConfig | Mapping[str, Any]) -> SkyRLConfig:
    """Upstream's `validate_cfg`: the typed config of `cfg` (e.g. hydra's DictConfig), checked by this fork's rules
    (`skyrl_train.config.validate_cfg`); raises one `ConfigError` naming every bad key. A `SkyRLConfig` is validated
    in place. What is checked against the registries (env blocks, estimator and loss names) is left to
    `BasePPOExp(cfg)`: upstream's scripts may register an env or a loss in their Ray task, after this runs."""
    typed = cfg if isinstance(cfg, SkyRLConfig) else build_config(cfg)
    validate_typed_cfg(typed, check_registrations=False)
    return typed


class BasePPOExp:
    """Builds every part of a run from the config, then trains. Each `get_*` method is an extension hook; those
    upstream SkyRL has take its arguments (`get_generator(cfg, tokenizer, inference_engine_client)`, `get_trainer`).

    `cfg` is a validated `SkyRLConfig`, or upstream's DictConfig (hydra's), which is typed and validated here (against
    the envs, estimators and losses registered by now). `tokenizer`, `train_dataset` and `eval_dataset` are built
    by their `get_*` hook on first use."""

    def __init__(self, cfg: SkyRLConfig | DictConfig | Mapping[str, Any]):
        if not isinstance(cfg, SkyRLConfig):
            cfg = build_config(cfg)
            validate_typed_cfg(cfg)
        self.cfg = cfg
        _log_added_keys(cfg)
        self.export_path = Path(cfg.trainer.export_path).expanduser()
        self.s3 = S3Settings.from_trainer_config(cfg.trainer)
        self.uploader = BackgroundUploader(self.s3.flush_timeout_seconds) if self.s3 is not None else None
        """One background uploader for checkpoints and eval dumps when S3 is on; flushed when `run` ends."""
        t = cfg.trainer
        uses_checkpoints = t.ckpt_interval > 0 or ResumeMode.parse(t.resume_mode) is not ResumeMode.NONE
        self.strategy = strategy_for(cfg, s3=self.s3, checkpoints=uses_checkpoints)
        """How `trainer.strategy` builds and releases the workers, and the device and dtype of this process's models
        (`skyrl_train.strategies`)."""
        self._resources = contextlib.ExitStack()
        """What `_setup_trainer` built that `run` releases when it ends (the workers, the tracker)."""

    @functools.cached_property
    def tokenizer(self):
        return self.get_tokenizer()

    @functools.cached_property
    def train_dataset(self) -> PromptDataset:
        return self.get_train_dataset()

    @functools.cached_property
    def eval_dataset(self) -> PromptDataset | None:
        return self.get_eval_dataset()

    def get_tokenizer(self, padding_side: str | None = None):
        """The policy's tokenizer, with a pad token; `padding_side` (upstream's argument) sets its padding side, which
        otherwise stays as loaded."""
        tokenizer = load_tokenizer(self.cfg.trainer.policy.model.path)
        if padding_side is not None:
            tokenizer.padding_side = padding_side
        return tokenizer

    def get_train_dataset(self) -> PromptDataset:
        return PromptDataset(self.cfg.data.train_data, self.tokenizer, self.cfg.trainer.max_prompt_length)

    def get_train_loader(self, dataset: PromptDataset) -> PromptDataLoader:
        """Shuffled batches of `trainer.train_batch_size` prompts, balanced over `data.balance_by` when it is set."""
        t, balance_by = self.cfg.trainer, self.cfg.data.balance_by
        groups = dataset.column(balance_by) if balance_by else None
        return PromptDataLoader(dataset, t.train_batch_size, seed=t.seed, groups=groups)

    def get_eval_dataset(self) -> PromptDataset | None:
        if not self.cfg.data.val_data or self.cfg.trainer.eval_interval <= 0:
            return None
        return PromptDataset(self.cfg.data.val_data, self.tokenizer, self.cfg.trainer.max_prompt_length)

    def get_tracker(self) -> Tracking:
        t = self.cfg.trainer
        return Tracking(t.project_name, t.run_name, backends=t.logger, config=self.cfg, output_dir=self.export_path)

    def get_checkpoint_manager(self) -> CheckpointManager:
        """Checkpoints under `trainer.ckpt_path`; with S3 on, also uploaded, rotated and resumed by an S3 sink."""
        t = self.cfg.trainer
        sink = None
        if self.s3 is not None:
            logger.info("S3 on: %s", self.s3.describe())
            if t.max_ckpts_to_keep != -1:
                logger.warning("trainer.max_ckpts_to_keep is not used with S3 on: trainer.s3.keep_local rotates")
            sink = S3CheckpointSink.from_settings(self.s3, self.uploader)
        return CheckpointManager(t.ckpt_path, t.max_ckpts_to_keep, t.ckpt_interval, sink=sink)

    def get_eval_dump_uploader(self) -> EvalDumpUploader | None:
        """Uploads eval dumps to `s3://{eval_bucket}/evals/{run_name}/` when S3 is on, else None."""
        return EvalDumpUploader(self.s3, self.uploader) if self.s3 is not None else None

    def preflight(self, train_dataset: PromptDataset | None, eval_dataset: PromptDataset | None) -> None:
        """Checks that need no model, run before it loads (`skyrl_train.preflight.check_envs`; with
        `trainer.push_to_hub`, `skyrl_train.models.hub.check_hub_access`)."""
        for line in check_envs(self.cfg, {"data.train_data": train_dataset, "data.val_data": eval_dataset}):
            logger.info("preflight: %s", line)
        if self.cfg.trainer.push_to_hub:
            logger.info("preflight: exports push to %s", check_hub_access(self.cfg.trainer.hub_model_id))

    def log_device(self) -> None:
        """Say where the models run and in which dtype, and why (`trainer.device`, `trainer.bf16`)."""
        logger.info(
            "%s run on %s (trainer.device=%s) in %s",
            self.strategy.driver_models,
            self.strategy.device,
            self.cfg.trainer.device,
            self.strategy.precision.reason,
        )

    def get_workers(self, num_training_steps: int) -> Workers:
        """The policy, ref (or None) and critic (or None), as `trainer.strategy` builds them."""
        return self.strategy.build_workers(num_training_steps)

    def get_inference_client(self) -> InferenceEngineInterface:
        """Upstream's hook: the engine(s) rollouts come from, `get_inference_engine` over the policy a local engine
        generates with (`_setup_trainer` builds the workers first)."""
        return self.get_inference_engine(self._engine_policy, self.tokenizer)

    def get_inference_engine(self, policy, tokenizer) -> InferenceEngineInterface:
        """The engine(s) rollouts come from: remote servers (`generator.run_engines_locally=false`), local vLLM
        engines (`generator.backend=vllm`; both get the policy's weights from `get_weight_sync`), else the local `hf`
        engine, which shares the policy's module."""
        if not self.cfg.generator.run_engines_locally:
            return self.make_remote_engines(tokenizer)
        if self.cfg.generator.backend == "vllm":
            return self.make_vllm_engines(policy, tokenizer)
        return self.make_inference_engine(policy.model, tokenizer)

    def make_vllm_engines(self, policy, tokenizer) -> InferenceEngineInterface:
        """`generator.num_inference_engines` vLLM engines as Ray actors (`skyrl_train.inference_engines.vllm`)
        behind a client that routes each episode to one engine; colocated ones (``trainer.placement.colocate_all``)
        share the fsdp2 policy's placement group."""
        from skyrl_train.inference_engines.client import InferenceEngineClient
        from skyrl_train.inference_engines.vllm.ray_engine import create_vllm_engines

        placement = self.strategy.engine_placement(policy)
        engines = create_vllm_engines(
            self.cfg,
            tokenizer,
            policy_placement_group=None if placement is None else placement[0],
            policy_bundles=None if placement is None else placement[1],
        )
        return InferenceEngineClient(engines)

    def make_inference_engine(self, model, tokenizer) -> InferenceEngineInterface:
        """A local `hf` inference engine over `model` as `generator.*` configures it."""
        g = self.cfg.generator
        if g.backend != "hf":
            raise NotImplementedError(
                f"generator.backend={g.backend!r} does not generate from a model in this process; use "
                "generator.backend=hf here"
            )
        from skyrl_train.inference_engines.hf.engine import HFInferenceEngine

        return HFInferenceEngine(
            model,
            tokenizer,
            max_num_seqs=g.max_num_seqs,
            seed=self.cfg.trainer.seed,
            prefix_cache_bytes=g.prefix_cache_bytes if g.enable_prefix_caching else 0,
            num_threads=self.cfg.trainer.cpu_threads,
            dtype=self.strategy.precision.engine_cast,
        )

    def make_remote_engines(self, tokenizer) -> InferenceEngineInterface:
        """One `RemoteInferenceEngine` per `generator.remote_inference_engine_urls` entry, behind a client that
        routes each episode to one server and takes unreachable servers out of service."""
        from skyrl_train.inference_engines.client import InferenceEngineClient
        from skyrl_train.inference_engines.remote import RemoteInferenceEngine

        g = self.cfg.generator
        engines = [
            RemoteInferenceEngine(
                url,
                g.model_name,
                tokenizer,
                tp_size=g.inference_engine_tensor_parallel_size,
                pp_size=g.inference_engine_pipeline_parallel_size,
                dp_size=g.inference_engine_data_parallel_size,
                api_key=g.remote_inference_engine_api_key,
                control_token=g.remote_inference_engine_control_token,
            )
            for url in g.remote_inference_engine_urls
        ]
        return InferenceEngineClient(engines)

    def get_weight_sync(
        self, engine: InferenceEngineInterface, policy, refresh: Callable[[], None] | None = None
    ) -> WeightSyncSender:
        """How the policy's weights reach `engine` after each update (`skyrl_train.weight_sync`): the mode follows
        upstream's rules (`transfer_mode`); `refresh` brings a local engine's copy of the policy up to date (fsdp2)."""
        from skyrl_train.weight_sync import WeightSyncSender, override_existing_update_group, transfer_mode
        from skyrl_train.weight_sync.sender import DEFAULT_CHUNK_BYTES
        from skyrl_train.weight_sync.strategy import trainer_address

        cfg, g = self.cfg, self.cfg.generator
        shares = g.run_engines_locally and g.backend == "hf"
        mode = transfer_mode(cfg, engine_shares_policy=shares)
        if mode == "broadcast" and g.weight_sync_backend == "nccl" and not torch.cuda.is_available():
            raise ValueError(
                "generator.weight_sync_backend=nccl needs CUDA, and this machine has none: set "
                "generator.weight_sync_backend=gloo to send the weights over CPU"
            )
        lora = cfg.trainer.policy.model.lora
        if not g.run_engines_locally:
            master_addr = trainer_address(g.remote_inference_engine_urls)
        elif g.backend == "vllm":  # engine actors may run on other nodes of the Ray cluster
            import ray

            master_addr = ray.util.get_node_ip_address()
        else:
            master_addr = "127.0.0.1"
        return WeightSyncSender(
            engine,
            policy,
            mode,
            backend=g.weight_sync_backend,
            master_addr=master_addr,
            lora_config=lora,
            base_model_path=cfg.trainer.policy.model.path,
            lora_sync_path=lora.lora_sync_path,
            override_existing=override_existing_update_group(cfg),
            refresh=refresh,
            chunk_bytes=(
                int(g.weight_transfer_threshold_cuda_ipc_GB * 2**30) if mode == "cuda_ipc" else DEFAULT_CHUNK_BYTES
            ),
        )

    def get_trainer_class(self) -> type[PPOTrainer]:
        """`FullyAsyncPPOTrainer` when generation may run ahead of the update (`trainer.fully_async.
        max_staleness_steps > 0`), else the synchronous `PPOTrainer`."""
        return FullyAsyncPPOTrainer if self.cfg.trainer.fully_async.max_staleness_steps > 0 else PPOTrainer

    def get_generator(
        self, cfg: SkyRLConfig, tokenizer, inference_engine_client: InferenceEngineInterface
    ) -> GeneratorInterface:
        """Upstream's hook, with its arguments: what generates the rollouts from `inference_engine_client`."""
        return SkyRLGymGenerator(
            cfg.generator, cfg.environment.skyrl_gym, inference_engine_client, tokenizer, seed=cfg.trainer.seed
        )

    def get_trainer(
        self,
        cfg: SkyRLConfig,
        tracker: Tracking,
        tokenizer,
        train_dataset: PromptDataset,
        eval_dataset: PromptDataset | None,
        inference_engine_client: InferenceEngineInterface,
        generator: GeneratorInterface,
        colocate_pg: None,
    ) -> PPOTrainer:
        """Upstream's hook, with its arguments (`colocate_pg` is None: the strategy places the engines): the trainer
        `run` trains with. The default is `get_trainer_class()` with the run's workers, loaders and weight sync
        (`skyrl_train.trainer_parts`); an override may return a `RayPPOTrainer` subclass built from these arguments,
        as upstream's scripts do."""
        return self.get_trainer_class()(
            cfg, tracker, tokenizer, generator=generator, **current_trainer_parts().trainer_kwargs()
        )

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
            api_key=g.http_endpoint_api_key,
        )

    def run(self) -> None:
        """Build everything and train; pending S3 uploads are flushed however it ends (SIGTERM and SIGINT too)."""
        if self.uploader is not None:
            self.uploader.install_exit_handlers()
        try:
            self._run()
        finally:
            if self.uploader is not None:
                self.uploader.close()

    def _run(self) -> None:
        t = self.cfg.trainer
        _seed_everything(t.seed)
        if t.cpu_threads is not None:
            torch.set_num_threads(t.cpu_threads)  # this thread's training forwards; the hf engine sets its own
        self.log_device()
        with self._resources:
            trainer = self._setup_trainer()
            endpoint = self._endpoint
            try:
                if endpoint is not None:
                    endpoint.start()
                    logger.info(
                        "serving the live policy as %r at %s/v1 while the trainer generates",
                        endpoint.served_model_name,
                        endpoint.url,
                    )
                asyncio.run(_train_then_close(trainer, self._weight_sync, self._inference_client))
            finally:
                if endpoint is not None:
                    endpoint.stop()
        self.write_report()

    def _setup_trainer(self) -> PPOTrainer:
        """Upstream's step before training: the loaders, the env preflight, the workers, the engine and its weight
        sync, the generator (served by the HTTP endpoint when it is on), the tracker and, from `get_trainer`, the
        trainer. The workers and the tracker are released when `run` ends (`_resources`)."""
        t = self.cfg.trainer
        train_loader = self.get_train_loader(self.train_dataset)
        eval_loader = PromptDataLoader.for_eval(self.eval_dataset, t.eval_batch_size) if self.eval_dataset else None
        if len(train_loader) == 0:
            raise ValueError(
                f"data.train_data has fewer prompts than trainer.train_batch_size={t.train_batch_size} "
                "(after prompt-length filtering): no training step would run"
            )
        self.preflight(self.train_dataset, self.eval_dataset)
        optimizer_steps = len(train_loader) * t.epochs * (t.train_batch_size // t.policy_mini_batch_size)
        workers = Workers(*self.get_workers(optimizer_steps * t.update_epochs_per_batch))
        self._resources.callback(self.release_workers, *workers)
        self._engine_policy, refresh = self.strategy.engine_policy(workers.policy)
        self._inference_client = self.get_inference_client()
        self._weight_sync = self.get_weight_sync(self._inference_client, workers.policy, refresh)
        generator = self.get_generator(self.cfg, self.tokenizer, self._inference_client)
        self._endpoint = self.get_http_endpoint(self._inference_client, self.tokenizer)
        if self._endpoint is not None:
            generator = self._endpoint.serve_during_generation(generator)
        tracker = self._resources.enter_context(self.get_tracker())
        parts = TrainerParts(
            train_loader,
            eval_loader,
            workers,
            self._weight_sync.sync,
            # Local engines sleep while the trainer updates; remote servers are never colocated with it.
            self._inference_client if self.cfg.generator.run_engines_locally else None,
            self.get_checkpoint_manager(),
            self.get_eval_dump_uploader(),
        )
        with building_trainer(parts):
            return self.get_trainer(
                cfg=self.cfg,
                tracker=tracker,
                tokenizer=self.tokenizer,
                train_dataset=self.train_dataset,
                eval_dataset=self.eval_dataset,
                inference_engine_client=self._inference_client,
                generator=generator,
                colocate_pg=None,
            )

    def release_workers(self, policy: Policy, ref: Reference | None, critic: Critic | None) -> None:
        """Free what `get_workers` holds beyond this process, on success and on any failure (with fsdp2, the Ray
        actors and placement groups: a driver that keeps running leaves nothing reserved on the cluster)."""
        self.strategy.release_workers(Workers(policy, ref, critic))

    def write_report(self) -> None:
        metrics_file = self.export_path / "metrics.jsonl"
        if metrics_file.exists():
            from skyrl_train.tracking.report import write_report

            write_report(metrics_file, self.export_path / "report")
            logger.info("run report written to %s", self.export_path / "report")


async def _train_then_close(trainer: PPOTrainer, weight_sync: WeightSyncSender, engine: InferenceEngineInterface):
    """Train, then leave the weight-update group and tear the engine down, on the loop that used them."""
    try:
        await trainer.train()
    finally:
        try:
            await weight_sync.close()
        except Exception:  # e.g. a server that died: nothing left to leave
            logger.warning("leaving the weight-update group failed", exc_info=True)
        await engine.teardown()


def _log_added_keys(cfg: SkyRLConfig) -> None:
    for key, value in added_keys(cfg).items():
        logger.warning(
            "%s=%r was added with `+`: only custom code reads it, nothing in skyrl_train (docs/extending.md)",
            key,
            redact_secrets(value, key.split(".")),
        )


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run(cfg: SkyRLConfig) -> None:
    """Train with a validated config."""
    BasePPOExp(cfg).run()


def main(argv: list[str] | None = None) -> int:
    """Load and validate the config from `argv` overrides (default: sys.argv[1:]), then `run` it."""
    return run_cli(argv, __doc__, run)


def run_cli(argv: list[str] | None, doc: str, job: Callable[[SkyRLConfig], object]) -> int:
    """The entrypoints' command line: `-h` prints `doc`; the `--config` presets and overrides in `argv` (default:
    sys.argv[1:]) are loaded and validated (exit 2 naming every bad key), the config's difference from the base is
    logged, then `job(cfg)` runs (exit 1 when a preflight, the infrastructure-failure check, a checkpoint problem,
    a Hub push or bad rows of the SFT data stop it, with the reason on stderr; exit 2 for a rule of the job's own on
    the config)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(doc)
        return 0
    try:
        presets, overrides = split_cli_args(args)
        loaded = resolve_config(overrides, presets=presets)
    except ConfigError as e:
        print(f"Invalid config: {e}", file=sys.stderr)
        return 2
    configure_logging()
    logger.info("%s", format_config_changes(config_changes(loaded)))
    try:
        job(loaded.cfg)
    except ConfigError as e:  # a rule of the job's own, e.g. main_sft's data
        print(f"Invalid config: {e}", file=sys.stderr)
        return 2
    except (
        PreflightError,
        InfraFailureError,
        CheckpointError,
        NotPlainDataError,
        HubPushError,
        DatasetValidationError,
    ) as e:
        print(f"Stopped: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
