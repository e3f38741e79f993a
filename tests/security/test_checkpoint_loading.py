"""Whoever can write a checkpoint (a shared disk, the S3 bucket a run resumes or exports from) runs no code in the
process that loads it.

A real tiny run writes a checkpoint; then each file of it in turn is replaced with a pickle whose `__reduce__` would
run a shell command creating a marker file, and the real entrypoints load it: a local resume, a resume from S3
(moto server), `export_hf` from an ``s3://`` URL whose manifest the attacker rewrote too, a training batch dump, an
FSDP2 checkpoint's DCP index and blobs. Every load is refused with an error naming the file, and the marker never
appears. An S3 object changed after upload (the manifest left as it was) is refused before anything is loaded,
naming the object; a checkpoint written before checkpoints held plain data (numpy RNG states) is refused naming the
file and why.
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.checkpoints import CheckpointError
from skyrl_train.distributed.dcp_load import DCP_INDEX_FILE, load_dcp
from skyrl_train.entrypoints.export_hf import export_from_s3
from skyrl_train.entrypoints.export_hf import main as export_main
from skyrl_train.entrypoints.main_base import main as train_main
from skyrl_train.storage import S3Store
from skyrl_train.testing import TINY_RUN_OVERRIDES, tiny_model  # noqa: F401
from skyrl_train.testing.s3 import s3_bucket, s3_client, s3_server  # noqa: F401
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.utils.plain_data import NotPlainDataError

REFUSED = "was not loaded: it holds objects other than tensors and plain containers"


class Payload:
    """Unpickled, it runs `touch <marker>`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def marker(tmp_path) -> Path:
    path = tmp_path / "code_ran"
    yield path
    assert not path.exists(), "the payload ran"


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model):  # noqa: F811
    """The overrides of a one-step run of the tiny model (without `trainer.ckpt_path`) and its checkpoint folder."""
    data = tmp_path_factory.mktemp("data")
    write_dataset(generate_dataset(train_size=4, val_size=0, seed=3, few_shot=0), data)
    overrides = [
        f"data.train_data=[{data / 'train.parquet'}]",
        "data.val_data=[]",
        f"trainer.policy.model.path={tiny_model}",
        *TINY_RUN_OVERRIDES,
        "trainer.max_prompt_length=512",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.eval_interval=-1",
        "trainer.ckpt_interval=1",
        "trainer.logger=console",
        "trainer.resume_mode=latest",
        "trainer.project_name=proj",
        "trainer.run_name=run1",
    ]
    out = tmp_path_factory.mktemp("run")
    assert train_main([*overrides, f"trainer.ckpt_path={out / 'ckpts'}", f"trainer.export_path={out / 'exports'}"]) == 0
    return overrides, out / "ckpts"


def tampered_copy(ckpts: Path, where: Path, file: str, content: object) -> Path:
    """A copy of the run's checkpoints with `global_step_1/<file>` replaced by `torch.save(content)`."""
    shutil.copytree(ckpts, where)
    torch.save(content, where / "global_step_1" / file)
    return where / "global_step_1" / file


@pytest.mark.parametrize("file", ["trainer_state.pt", "policy/optimizer.pt", "policy/extra_state.pt", "data.pt"])
def test_a_local_resume_refuses_a_pickle_payload_in_any_checkpoint_file(run, tmp_path, marker, capsys, file):
    overrides, ckpts = run
    path = tampered_copy(ckpts, tmp_path / "ckpts", file, {"state": Payload(marker)})
    status = train_main([*overrides, f"trainer.ckpt_path={tmp_path / 'ckpts'}", f"trainer.export_path={tmp_path}"])
    assert status == 1
    assert f"Stopped: {path} {REFUSED} (Trying to load unsupported GLOBAL posix.system" in capsys.readouterr().err


def test_a_checkpoint_with_numpy_rng_states_is_refused_naming_the_file_and_why(run, tmp_path, capsys):
    overrides, ckpts = run
    old_format = {"rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}}
    path = tampered_copy(ckpts, tmp_path / "ckpts", "policy/extra_state.pt", old_format)
    assert train_main([*overrides, f"trainer.ckpt_path={tmp_path / 'ckpts'}", f"trainer.export_path={tmp_path}"]) == 1
    err = capsys.readouterr().err
    assert f"Stopped: {path} {REFUSED} (Unsupported global: GLOBAL numpy._core.multiarray._reconstruct" in err
    assert "before its checkpoints held plain data only (numpy RNG states)" in err


def test_a_resume_from_s3_refuses_a_payload_whose_manifest_the_writer_rewrote(
    run, tmp_path, marker, capsys, s3_server, s3_bucket  # noqa: F811
):
    overrides, ckpts = run
    tampered_copy(ckpts, tmp_path / "attacker", "trainer_state.pt", {"global_step": Payload(marker)})
    S3Store(s3_client(s3_server), s3_bucket).upload_folder(
        tmp_path / "attacker" / "global_step_1", "proj/run1/global_step_1"
    )
    fresh = tmp_path / "fresh_machine"
    status = train_main(
        [*overrides, f"trainer.s3.bucket={s3_bucket}", f"trainer.ckpt_path={fresh}", f"trainer.export_path={tmp_path}"]
    )
    assert status == 1
    err = capsys.readouterr().err
    assert f"Stopped: {fresh / 'global_step_1' / 'trainer_state.pt'} {REFUSED}" in err


def test_export_from_s3_checks_every_object_before_loading_and_refuses_a_rewritten_manifest(
    run, tmp_path, marker, capsys, s3_server, s3_bucket  # noqa: F811
):
    _, ckpts = run
    store = S3Store(s3_client(s3_server), s3_bucket)
    store.upload_folder(ckpts / "global_step_1", "proj/run1/global_step_1")
    url = f"s3://{s3_bucket}/proj/run1/global_step_1"
    tampered_copy(ckpts, tmp_path / "attacker", "trainer_state.pt", {"config": Payload(marker)})
    body = (tmp_path / "attacker" / "global_step_1" / "trainer_state.pt").read_bytes()
    s3_client(s3_server).put_object(Bucket=s3_bucket, Key="proj/run1/global_step_1/trainer_state.pt", Body=body)
    with pytest.raises(CheckpointError, match=rf"could not download checkpoint {url}: {url}/trainer_state.pt has "):
        export_from_s3(url, tmp_path / "model")

    store.upload_folder(tmp_path / "attacker" / "global_step_1", "proj/run1/global_step_1")  # the manifest too
    assert export_main([url, str(tmp_path / "model")]) == 1
    assert f"trainer_state.pt {REFUSED} (Trying to load unsupported GLOBAL posix.system" in capsys.readouterr().err
    assert not (tmp_path / "model").exists()


def test_a_training_batch_dump_holding_a_payload_is_refused(tmp_path, marker):
    torch.save({"tensors": {}, "metadata": {"uids": Payload(marker)}}, tmp_path / "batch.pkl")
    with pytest.raises(NotPlainDataError, match=rf"{tmp_path / 'batch.pkl'} {REFUSED}"):
        TrainingInputBatch.load(tmp_path / "batch.pkl")


def model_and_optimizer_state(lr: float) -> dict:
    """The DCP state of a small model and its AdamW (a step taken: tensors and non-tensor entries, e.g. `lr`)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


@pytest.fixture
def dcp_folder(tmp_path) -> tuple[Path, dict]:
    """A DCP checkpoint of `model_and_optimizer_state(lr=0.5)`, and what it holds."""
    state = model_and_optimizer_state(lr=0.5)
    dcp.save(state, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    return tmp_path / "dcp", state


def test_a_plain_dcp_checkpoint_loads(dcp_folder):
    folder, saved = dcp_folder
    state = model_and_optimizer_state(lr=0.1)
    load_dcp(state, folder)
    assert all(state["model"][k].equal(saved["model"][k]) for k in saved["model"])
    assert state["optimizer"]["param_groups"][0]["lr"] == 0.5  # a non-tensor entry, through the checked planner


def test_a_dcp_index_holding_a_payload_is_refused(dcp_folder, marker):
    folder, _ = dcp_folder
    with open(folder / DCP_INDEX_FILE, "wb") as f:
        pickle.dump(Payload(marker), f)
    with pytest.raises(NotPlainDataError, match=rf"{folder / DCP_INDEX_FILE} was not loaded: it names posix.system"):
        load_dcp(model_and_optimizer_state(lr=0.1), folder)


def test_a_dcp_blob_holding_a_payload_is_refused(tmp_path, marker):
    dcp.save({"extra": Payload(marker)}, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    with pytest.raises(CheckpointException, match=rf"entry 'extra' of {tmp_path / 'dcp'} {REFUSED}"):
        load_dcp({"extra": None}, tmp_path / "dcp")
