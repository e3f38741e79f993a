"""A checkpoint a real training run (single, or fsdp2 on 2 gloo ranks: slow) uploaded to S3 (moto server) exports to
the same transformers model the run's own HF export holds; bad sources are refused with an error naming them."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.checkpoints.manager import CheckpointError
from skyrl_train.config import load_config, to_dict
from skyrl_train.config.schema import DISTRIBUTED_STRATEGIES
from skyrl_train.entrypoints.export_hf import export_checkpoint, export_from_s3
from skyrl_train.entrypoints.export_hf import main as export_main
from skyrl_train.entrypoints.main_base import main as train_main
from skyrl_train.storage.rank_uploads import RankUploads
from skyrl_train.testing import TINY_RUN_OVERRIDES, tiny_model  # noqa: F401
from skyrl_train.testing.ray import fsdp2_overrides, subprocess_env


@pytest.fixture(scope="module")
def run_overrides(tmp_path_factory, tiny_model):  # noqa: F811
    """A run folder and the overrides of one GRPO step of the tiny model (S3 added by the test)."""
    run = tmp_path_factory.mktemp("run")
    write_dataset(generate_dataset(train_size=4, val_size=2, seed=5, few_shot=0), run / "data")
    return run, [
        f"data.train_data=[{run / 'data' / 'train.parquet'}]",
        f"data.val_data=[{run / 'data' / 'validation.parquet'}]",
        f"trainer.policy.model.path={tiny_model}",
        *TINY_RUN_OVERRIDES,
        # Full fine-tuning with weight decay: the tiny model earns no reward (zero advantages), so only the decay moves
        # the weights, every one of them. (LoRA's merge is export_hf's, tested in tests/workers.)
        "trainer.policy.optimizer_config.lr=1e-2",
        "trainer.policy.optimizer_config.weight_decay=0.1",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.eval_interval=-1",
        "trainer.ckpt_interval=1",
        "trainer.logger=jsonl",
        "trainer.project_name=proj",
        "trainer.run_name=run1",
    ]


@pytest.mark.parametrize("strategy", ["single", pytest.param("fsdp2", marks=pytest.mark.slow)])
def test_s3_checkpoint_exports_the_model_the_run_exported(
    run_overrides, tiny_model, s3_server, s3_bucket, tmp_path, strategy  # noqa: F811
):
    run, overrides = run_overrides
    overrides = (fsdp2_overrides() if strategy in DISTRIBUTED_STRATEGIES else []) + overrides
    overrides += [f"trainer.ckpt_path={run / strategy / 'ckpts'}", f"trainer.export_path={run / strategy / 'exports'}"]
    overrides.append(f"trainer.s3.bucket={s3_bucket}")
    if strategy == "single":
        assert train_main(overrides) == 0
    else:  # its own process: it starts a local Ray cluster for the 2 ranks
        command = [sys.executable, "-m", "skyrl_train.entrypoints.main_base", *overrides]
        trained = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=600)
        assert trained.returncode == 0, trained.stderr[-3000:]

    out = tmp_path / "model"
    assert export_main([f"s3://{s3_bucket}/proj/run1/global_step_1", str(out)]) == 0

    exported = load_file(str(out / "model.safetensors"))
    by_trainer = load_file(str(run / strategy / "exports" / "global_step_1" / "policy" / "model.safetensors"))
    base = load_file(f"{tiny_model}/model.safetensors")
    assert exported.keys() == by_trainer.keys() == base.keys()
    assert all(exported[k].equal(by_trainer[k]) for k in exported)
    assert all(not exported[k].equal(base[k]) for k in exported)  # trained: not the base model
    assert (out / "tokenizer.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # the download folder is gone


def test_sources_that_are_not_a_checkpoint_step_are_refused(s3_bucket, tmp_path):  # noqa: F811
    with pytest.raises(CheckpointError, match="expected s3://<bucket>/<prefix>/global_step_<N>"):
        export_from_s3(f"s3://{s3_bucket}/proj/run1", tmp_path / "out")
    with pytest.raises(CheckpointError, match=r"could not download checkpoint .*global_step_3.*MANIFEST\.json"):
        export_from_s3(f"s3://{s3_bucket}/proj/run1/global_step_3", tmp_path / "out")
    with pytest.raises(CheckpointError, match="has no trainer_state.pt"):
        export_checkpoint(tmp_path, tmp_path / "out")


def test_a_step_folder_without_policy_weights_is_refused_and_rank_uploads_point_to_s3(
    tiny_model, tmp_path  # noqa: F811
):
    (tmp_path / "policy").mkdir()
    config = to_dict(load_config([f"trainer.policy.model.path={tiny_model}"], validate=False))
    torch.save({"global_step": 1, "config": config}, tmp_path / "trainer_state.pt")
    with pytest.raises(CheckpointError, match=r"policy holds neither model.safetensors \(single\) nor model_optim/"):
        export_checkpoint(tmp_path, tmp_path / "out")
    RankUploads("ckpts", "proj/run1/global_step_1/policy", ()).write(tmp_path / "policy")
    with pytest.raises(CheckpointError, match=r"uploaded by the training ranks to s3://ckpts/proj/run1/global_step_1/"):
        export_checkpoint(tmp_path, tmp_path / "out")
