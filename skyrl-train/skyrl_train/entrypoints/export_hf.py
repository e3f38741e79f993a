"""Export a checkpoint's policy as a plain transformers model folder, e.g. to evaluate it with `main_generate`.

    python -m skyrl_train.entrypoints.export_hf s3://skyrl-checkpoints/skyrl-gsm8k/<run>/global_step_40 OUT_DIR
    python -m skyrl_train.entrypoints.export_hf ~/ckpts/global_step_40 OUT_DIR

A checkpoint (`global_step_N/`) holds the policy's *trainable* weights, optimizer and RNG state, not a loadable
model (the HF export under `trainer.export_path` stays on the training machine). So the policy is rebuilt the way
a resume rebuilds it: the single-process strategy's policy worker, on this machine's CPU, from the run's own config
(saved in `trainer_state.pt`: the base model `trainer.policy.model.path`, LoRA settings, `bf16`), its weights loaded (`load_checkpoint` for a single-process
checkpoint; for an fsdp2 one, the trainable weights of its DCP shards, reassembled in this one process), then
`export_hf` (LoRA merged, with the tokenizer; for a LoRA policy also its PEFT adapter in `OUT_DIR/adapter/`, which
`PeftModel.from_pretrained(base, OUT_DIR/adapter)` loads). The base model must be reachable here as it was for training.

An `s3://` source is downloaded first, every file checked against the step's MANIFEST.json (endpoint from
AWS_ENDPOINT_URL, credentials from boto3's chain), into a temporary folder beside OUT_DIR, removed afterwards;
nothing is loaded before every file matches. Whoever can write the bucket can also rewrite the manifest, so every
file is then read as plain data only (`skyrl_train.utils.plain_data`, `skyrl_train.distributed.dcp_load`): a
checkpoint holding any other object is refused, naming the file, and nothing in it runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from pathlib import Path

import torch
from torch.distributed.checkpoint.api import CheckpointException

from skyrl_train.checkpoints.manager import CheckpointError, parse_step
from skyrl_train.config import ConfigError, SkyRLConfig, build_config
from skyrl_train.distributed.dcp_load import load_dcp
from skyrl_train.distributed.fsdp_workers import DCP_DIR
from skyrl_train.storage import S3StorageError, S3Store, make_s3_client
from skyrl_train.storage.rank_uploads import RankUploads
from skyrl_train.strategies import SingleProcess
from skyrl_train.trainer import TRAINER_STATE_FILE
from skyrl_train.utils.plain_data import NotPlainDataError, load_plain
from skyrl_train.workers.trainable import MODEL_FILE

logger = logging.getLogger(__name__)

POLICY_DIR = "policy"


def checkpoint_config(step_dir: Path) -> SkyRLConfig:
    """The config the run that wrote `step_dir` trained with (from its `trainer_state.pt`)."""
    state_file = step_dir / TRAINER_STATE_FILE
    if not state_file.is_file():
        raise CheckpointError(f"{step_dir} is not a checkpoint folder: it has no {TRAINER_STATE_FILE}")
    state = load_plain(state_file)
    if "config" not in state:
        raise CheckpointError(f"{state_file} holds no 'config': cannot tell which model the checkpoint belongs to")
    try:
        return build_config(state["config"])
    except ConfigError as exc:
        raise CheckpointError(f"the config saved in {state_file} does not load: {exc}") from exc


def export_checkpoint(step_dir: str | os.PathLike, output: str | os.PathLike) -> Path:
    """Write checkpoint `step_dir`'s policy to `output` as a transformers model folder (LoRA merged, its PEFT adapter
    in `output/adapter/`); returns it."""
    step_dir, output = Path(step_dir).expanduser(), Path(output).expanduser()
    cfg = checkpoint_config(step_dir)
    policy_dir = step_dir / POLICY_DIR
    if not (policy_dir / MODEL_FILE).is_file() and not (policy_dir / DCP_DIR).is_dir():
        uploads = RankUploads.read(policy_dir)
        if uploads is not None:  # fsdp2 on nodes without a shared ckpt_path: the shards only went to S3
            raise CheckpointError(
                f"{policy_dir}'s files were uploaded by the training ranks to {uploads.url()}: export the step from "
                "its s3:// URL"
            )
        raise CheckpointError(f"{policy_dir} holds neither {MODEL_FILE} (single) nor {DCP_DIR}/ (fsdp2)")
    t = cfg.trainer
    # On the CPU, whatever device the run trained on, in the weights' dtype there: fp32 (bf16 on the CPU is autocast
    # over fp32 weights, `utils.device.precision`), lossless for a run that trained bf16 weights on a GPU.
    t.device = "cpu"
    policy = SingleProcess(cfg).worker_builder(num_training_steps=None).policy()
    try:
        if (policy_dir / MODEL_FILE).is_file():
            policy.load_checkpoint(policy_dir)
        else:
            _load_sharded_weights(policy.model, policy_dir / DCP_DIR)
    except (ValueError, CheckpointException) as exc:  # weights that do not match the rebuilt model
        raise CheckpointError(f"{policy_dir} does not fit the model its run's config builds: {exc}") from exc
    policy.export_hf(output)
    logger.info("exported %s (base %s) to %s", step_dir, t.policy.model.path, output)
    return output


def _load_sharded_weights(model: torch.nn.Module, dcp_dir: Path) -> None:
    """Load an fsdp2 checkpoint's trainable weights into `model` in this one process (no process group: DCP
    reassembles the shards); the optimizer state it also holds is not read."""
    weights = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    state = {"model": weights}
    load_dcp(state, dcp_dir)  # reads only the keys `state` asks for
    model.load_state_dict(state["model"], strict=False)  # the frozen weights are the base model's


def export_from_s3(url: str, output: str | os.PathLike, store: S3Store | None = None) -> Path:
    """Download `s3://bucket/.../global_step_N` (checked against its manifest), then `export_checkpoint` it."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    if not url.startswith("s3://") or not bucket or parse_step(Path(prefix)) is None:
        raise CheckpointError(f"{url}: expected s3://<bucket>/<prefix>/global_step_<N>")
    store = store or S3Store(make_s3_client(os.environ.get("AWS_ENDPOINT_URL") or None), bucket)
    output = Path(output).expanduser()
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".checkpoint-", dir=output.parent) as download:
        logger.info("downloading checkpoint %s", url)
        try:
            store.download_folder(prefix, Path(download))
        except S3StorageError as exc:
            raise CheckpointError(f"could not download checkpoint {url}: {exc}") from exc
        return export_checkpoint(download, output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a global_step_N folder: local path or s3://bucket/prefix/global_step_N")
    parser.add_argument("output", help="folder for the transformers model (config, weights, tokenizer)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.checkpoint.startswith("s3://"):
            path = export_from_s3(args.checkpoint, args.output)
        else:
            path = export_checkpoint(args.checkpoint, args.output)
    except (CheckpointError, NotPlainDataError) as exc:
        print(f"export_hf: error: {exc}", file=sys.stderr)
        return 1
    print(f"exported {args.checkpoint} to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
