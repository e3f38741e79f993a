"""A real training process killed with SIGKILL mid-step and mid-checkpoint resumes from the last complete
checkpoint, at the same data position, and never from a partial checkpoint.

The launcher below wraps the real entrypoint; it only decides *when* the process kills itself (inside the
N-th policy update, or right after the policy files of the N-th checkpoint are written).

With ``trainer.strategy=fsdp2`` (slow, ~4 min) the same happens to the driver of a LoRA policy on 2 gloo ranks
(Ray actors of a local cluster, which Ray tears down with the killed driver); its checkpoints are sharded.
"""

import signal
import subprocess
import sys
import textwrap

import pytest

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.checkpoints import LATEST_CKPT_FILE
from skyrl_train.config.schema import DISTRIBUTED_STRATEGIES
from skyrl_train.testing import TINY_RUN_OVERRIDES
from skyrl_train.testing.ray import fsdp2_overrides, subprocess_env
from skyrl_train.training_batch import TrainingInputBatch

LAUNCHER = textwrap.dedent("""
    import os, signal, sys
    from skyrl_train.entrypoints import main_base
    from skyrl_train.distributed.worker_groups import PolicyWorkerGroup
    from skyrl_train.workers import PolicyWorker

    where, _, nth = os.environ.get("KILL_AT", "").partition(":")
    calls = {"train": 0, "checkpoint": 0}

    def killing(name, method):
        def wrapper(self, *args, **kwargs):
            calls[name] += 1
            if name == "train" and where == "train" and calls[name] == int(nth):
                os.kill(os.getpid(), signal.SIGKILL)  # mid-step: after generation, inside the update
            result = method(self, *args, **kwargs)
            if name == "checkpoint" and where == "checkpoint" and calls[name] == int(nth):
                os.kill(os.getpid(), signal.SIGKILL)  # mid-checkpoint: policy written, step not committed
            return result
        return wrapper

    policy_cls = PolicyWorkerGroup if os.environ["STRATEGY"] == "fsdp2" else PolicyWorker
    policy_cls.ppo_train = killing("train", policy_cls.ppo_train)
    policy_cls.save_checkpoint = killing("checkpoint", policy_cls.save_checkpoint)
    sys.exit(main_base.main(sys.argv[1:]))
    """)

STEPS = 6


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    write_dataset(generate_dataset(train_size=4 * STEPS, val_size=0, seed=3, few_shot=0), folder)
    return folder


def train(run_dir, data_dir, model_path, kill_at=None, strategy="single"):
    overrides = (fsdp2_overrides() if strategy in DISTRIBUTED_STRATEGIES else []) + [
        f"data.train_data=[{data_dir / 'train.parquet'}]",
        "data.val_data=[]",
        f"trainer.policy.model.path={model_path}",
        *TINY_RUN_OVERRIDES,
        "trainer.max_prompt_length=512",
        "trainer.policy.model.lora.rank=4",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.eval_interval=-1",
        "trainer.ckpt_interval=2",
        "trainer.dump_data_batch=true",
        "trainer.logger=jsonl",
        f"trainer.ckpt_path={run_dir / 'ckpts'}",
        f"trainer.export_path={run_dir / 'exports'}",
        "trainer.resume_mode=latest",
    ]
    env = subprocess_env(KILL_AT=kill_at or "", STRATEGY=strategy)
    return subprocess.run(
        [sys.executable, "-c", LAUNCHER, *overrides], env=env, capture_output=True, text=True, timeout=600
    )


def batch_uids(run_dir):
    dumps = run_dir / "exports" / "dumped_data"
    return {
        step: TrainingInputBatch.load(dumps / f"global_step_{step}_training_input.pkl").metadata["uids"]
        for step in range(1, STEPS + 1)
    }


def latest(run_dir):
    return int((run_dir / "ckpts" / LATEST_CKPT_FILE).read_text())


@pytest.mark.parametrize("strategy", ["single", pytest.param("fsdp2", marks=pytest.mark.slow)])
def test_killed_runs_resume_from_the_last_complete_checkpoint_at_the_same_data_position(
    tmp_path, data_dir, tiny_model, strategy
):
    reference = tmp_path / "reference"
    done = train(reference, data_dir, tiny_model, strategy=strategy)
    assert done.returncode == 0, done.stderr[-3000:]

    run = tmp_path / "killed"
    killed = train(run, data_dir, tiny_model, kill_at="train:3", strategy=strategy)
    assert killed.returncode == -signal.SIGKILL
    assert latest(run) == 2

    killed = train(
        run, data_dir, tiny_model, kill_at="checkpoint:2", strategy=strategy
    )  # resumed at 2: saves 4, dies saving 6
    assert killed.returncode == -signal.SIGKILL
    assert latest(run) == 4
    partial = [p.name for p in (run / "ckpts").iterdir() if p.name.startswith(".global_step_6.partial-")]
    assert len(partial) == 1
    assert not (run / "ckpts" / "global_step_6").exists()

    resumed = train(run, data_dir, tiny_model, strategy=strategy)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and "global_step_4 at step 4" in resumed.stderr
    if strategy in DISTRIBUTED_STRATEGIES:  # the ranks' log records reach the driver's console
        assert "[rank 1] skyrl_train.distributed.actor_group: joined the gloo process group" in resumed.stderr
    assert latest(run) == STEPS
    assert batch_uids(run) == batch_uids(reference)
    assert sorted(p.name for p in (run / "ckpts").iterdir()) == [
        "global_step_2",
        "global_step_4",
        "global_step_6",
        LATEST_CKPT_FILE,
    ]

    again = train(run, data_dir, tiny_model, strategy=strategy)  # the same command once more: nothing to train
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"global_step_{STEPS} is at step {STEPS} of {STEPS}: nothing left to train" in again.stderr
    assert latest(run) == STEPS
