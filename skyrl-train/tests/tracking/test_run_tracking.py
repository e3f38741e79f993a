"""Tracking in real training runs (`python -m skyrl_train.entrypoints.main_base`, tiny model, W&B offline):
``trainer.logger=wandb`` alone still writes ``metrics.jsonl`` and the run report, and a run resumed from a checkpoint
logs into the W&B run of the run that wrote it.

The first invocation trains epoch 1 (2 steps, a checkpoint each); the second, with ``trainer.epochs=2``, resumes from
step 2 and trains steps 3 and 4.
"""

import json
import os
import subprocess
import sys

import pytest
import wandb

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.testing import TINY_RUN_OVERRIDES, tiny_model  # noqa: F401

from .test_wandb import _CREDENTIAL_VARS, _history, _keyless_env, _read_records


def _train(run_dir, data_dir, model_path, *overrides):
    args = [
        f"data.train_data=[{data_dir / 'train.parquet'}]",
        "data.val_data=[]",
        f"trainer.policy.model.path={model_path}",
        *TINY_RUN_OVERRIDES,
        "trainer.policy.model.lora.rank=4",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.eval_interval=-1",
        "trainer.ckpt_interval=1",
        "trainer.logger=wandb",
        "trainer.project_name=skyrl-tests",
        "trainer.run_name=resumed",
        f"trainer.ckpt_path={run_dir / 'ckpts'}",
        f"trainer.export_path={run_dir / 'exports'}",
        *overrides,
    ]
    env = {k: v for k, v in os.environ.items() if k not in _CREDENTIAL_VARS}
    env |= _keyless_env(run_dir / "home") | {"WANDB_MODE": "offline"}
    done = subprocess.run(
        [sys.executable, "-m", "skyrl_train.entrypoints.main_base", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _run_record(run_dir):
    [record] = [r.run for r in _read_records(next(run_dir.glob("run-*.wandb"))) if r.WhichOneof("record_type") == "run"]
    return record


@pytest.fixture(scope="module")
def two_invocations(tmp_path_factory, tiny_model):  # noqa: F811
    data = tmp_path_factory.mktemp("data")
    write_dataset(generate_dataset(train_size=8, val_size=0, seed=3, few_shot=0), data)
    run = tmp_path_factory.mktemp("run")
    first = _train(run, data, tiny_model)
    report = (run / "exports" / "report" / "summary.md").read_text()  # before the second run rewrites it
    second = _train(run, data, tiny_model, "trainer.epochs=2")
    wandb.teardown()
    return {"run": run, "first": first, "second": second, "first_report": report}


def test_wandb_alone_still_writes_metrics_jsonl_and_the_report(two_invocations):
    exports = two_invocations["run"] / "exports"
    steps = [json.loads(line)["step"] for line in (exports / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 2, 3, 4]  # the resume logs its checkpoint's step again; readers keep the later row
    assert "- Steps run: 2 (steps 1 to 2)" in two_invocations["first_report"]
    assert (exports / "report" / "summary.json").is_file()
    assert "run report written to" in two_invocations["first"].stderr


def test_the_resumed_invocation_logs_into_the_same_wandb_run(two_invocations):
    runs = sorted((two_invocations["run"] / "exports" / "wandb").glob("offline-run-*"))
    assert len(runs) == 2
    first, second = (_run_record(folder) for folder in runs)
    assert first.run_id == second.run_id
    assert runs[0].name.endswith(f"-{first.run_id}") and runs[1].name.endswith(f"-{first.run_id}")
    assert "W&B: resuming run " + first.run_id in two_invocations["second"].stderr
    assert [step for step, _ in _history(_read_records(next(runs[0].glob("run-*.wandb"))))] == [1, 2]
    assert [step for step, _ in _history(_read_records(next(runs[1].glob("run-*.wandb"))))] == [2, 3, 4]


def test_the_checkpoint_keeps_the_wandb_run_id(two_invocations):
    import torch

    state = torch.load(two_invocations["run"] / "ckpts" / "global_step_4" / "trainer_state.pt", weights_only=True)
    [folder, _] = sorted((two_invocations["run"] / "exports" / "wandb").glob("offline-run-*"))
    assert state["tracking"] == {"wandb": {"run_id": folder.name.rsplit("-", 1)[1]}}
